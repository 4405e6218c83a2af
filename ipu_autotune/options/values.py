"""The checks a flag's text goes through: each turns the text into the option's value or
refuses it with `BadValue`, whose message the parser shows after the flag's name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class BadValue(ValueError):
    """A flag's value refused, with the reason shown after the flag's name (argparse's
    ArgumentTypeError, which args.py turns it into)."""


def positive(kind: type) -> Callable[[str], Any]:
    """A positive int or float."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise BadValue(f"expected {noun}, got {text!r}") from None
        if not value > 0:
            raise BadValue(f"must be positive, got {text}")
        return value
    parse.__name__ = kind.__name__  # a message names the type
    return parse


def number_in(low: float, high: float, what: str) -> Callable[[str], float]:
    """A number in [low, high], refused in one line naming the range."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise BadValue(f"expected {what} in [{low:g}, {high:g}], got {text!r}") from None
        if not low <= value <= high:
            raise BadValue(f"must be {what} in [{low:g}, {high:g}], got {value}")
        return value
    return parse


def one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """One of `choices`, refused as argparse refuses a choice."""
    def parse(text: str) -> str:
        if text not in choices:
            raise BadValue(f"invalid choice: {text!r} (choose from {', '.join(map(repr, choices))})")
        return text
    parse.__name__ = "str"
    return parse


def shape(text: str) -> tuple[int, ...]:
    """C,H,W (or CxHxW): one sample's shape."""
    try:
        dims = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        raise BadValue(f"expected C,H,W such as 3,224,224, got {text!r}") from None
    if not dims or any(s < 1 for s in dims):
        raise BadValue(f"dimensions must be positive, got {text!r}")
    return dims


def micro_batch_knob(text: str) -> str | dict[str, Any]:
    """'search', or 'LOW-HIGH': the micro_batch knob of the search space."""
    if text == "search":
        return text
    low, sep, high = text.partition("-")
    try:
        low_n, high_n = int(low), int(high if sep else low)
    except ValueError:
        raise BadValue(f"expected 'search' or a range such as 8-128, got {text!r}") from None
    if not 1 <= low_n <= high_n:
        raise BadValue(f"expected 1 <= LOW <= HIGH, got {text!r}")
    return {"low": low_n, "high": high_n, "log": True}
