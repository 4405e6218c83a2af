"""Parsing of values: the check each option's value goes through. A check takes the flag's text
(the command line) or a Python value (the API: `(3, 32, 32)` for `input_shape`, `8` for
`batch_size`; a string is read as the flag's text would be), and returns the option's value or
refuses it with `BadValue`, whose message follows the flag's name. A check accepts its own
result, so options built from checked values can be checked again (table.CommandOptions).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from ..models.shapes import parse_shape

_T = TypeVar("_T")

#: a check: the given text or value -> the option's value (raises BadValue)
Check = Callable[[object], Any]


class BadValue(ValueError):
    """A value refused, with the reason shown after the flag's name (argparse's
    ArgumentTypeError, which options/parser.py turns it into)."""


def named(name: str) -> Callable[[Callable[[object], _T]], Callable[[object], _T]]:
    """Name a check as argparse names a type in its messages ('int', 'float', 'str')."""

    def rename(check: Callable[[object], _T]) -> Callable[[object], _T]:
        check.__name__ = name
        return check

    return rename


def _number(value: object, kind: type[int] | type[float], noun: str) -> int | float:
    """`value` as an int or a float: the text of one, or one (never a bool; a float is no int)."""
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    elif (
        isinstance(value, int)
        and not isinstance(value, bool)
        or kind is float
        and isinstance(value, float)
    ):
        return kind(value)
    raise BadValue(f"expected {noun}, got {value!r}")


@named("int")
def whole_number(value: object) -> int:
    """Any whole number (a seed, a trial number)."""
    return int(_number(value, int, "a whole number"))


@named("float")
def number(value: object) -> float:
    """Any number (seconds, a margin, a probability the model's own checks bound)."""
    return float(_number(value, float, "a number"))


def positive(kind: type[int] | type[float]) -> Check:
    """A positive int or float."""
    noun = "a whole number" if kind is int else "a number"

    @named(kind.__name__)
    def check(value: object) -> int | float:
        checked = _number(value, kind, noun)
        if not checked > 0:
            raise BadValue(f"must be positive, got {value}")
        return checked

    return check


def number_in(low: float, high: float, what: str) -> Check:
    """A number in [low, high], refused in one line naming the range."""

    @named("float")
    def check(value: object) -> float:
        checked = float(_number(value, float, f"{what} in [{low:g}, {high:g}]"))
        if not low <= checked <= high:
            raise BadValue(f"must be {what} in [{low:g}, {high:g}], got {checked}")
        return checked

    return check


def one_of(choices: tuple[str, ...]) -> Check:
    """One of `choices`, refused as argparse refuses a choice."""

    @named("str")
    def check(value: object) -> str:
        if not isinstance(value, str) or value not in choices:
            raise BadValue(
                f"invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})"
            )
        return value

    return check


@named("str")
def text(value: object) -> str:
    """Text: a name, a URL, a path (a pathlib.Path is its text)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise BadValue(f"expected text, got {value!r}")
    return value


@named("shape")
def shape(value: object) -> tuple[int, ...]:
    """One sample's shape: 'C,H,W' (or 'CxHxW'), or a sequence of positive whole numbers."""
    if isinstance(value, str):
        try:
            return parse_shape(value)
        except ValueError as exc:
            raise BadValue(f"expected C,H,W such as 3,224,224: {exc}") from None
    if (
        isinstance(value, (tuple, list))
        and value
        and all(isinstance(d, int) and not isinstance(d, bool) for d in value)
    ):
        if any(d < 1 for d in value):
            raise BadValue(
                f"expected C,H,W such as 3,224,224: dimensions must be positive, got {value!r}"
            )
        return tuple(value)
    raise BadValue(f"expected C,H,W such as 3,224,224, got {value!r}")


@named("str")
def micro_batch_knob(value: object) -> str | dict[str, Any]:
    """'search', or a range 'LOW-HIGH' (or {'low': LOW, 'high': HIGH}): the micro_batch knob
    of the search space."""
    if value == "search":
        return "search"
    if isinstance(value, dict) and {"low", "high"} <= set(value) <= {"low", "high", "log"}:
        low, high = value["low"], value["high"]
    elif isinstance(value, str):
        low, sep, high = value.partition("-")
        high = high if sep else low
    else:
        raise BadValue(f"expected 'search' or a range such as 8-128, got {value!r}")
    try:
        low_n, high_n = whole_number(low), whole_number(high)
    except BadValue:
        raise BadValue(f"expected 'search' or a range such as 8-128, got {value!r}") from None
    if not 1 <= low_n <= high_n:
        raise BadValue(f"expected 1 <= LOW <= HIGH, got {value!r}")
    return {"low": low_n, "high": high_n, "log": True}
