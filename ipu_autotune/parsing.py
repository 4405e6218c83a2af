"""Reading the config files' values: TOML with one-line errors naming the file and line, the
allowed values of the Problem's word-valued keys (the knobs' are the knob spec's), and each
[problem]/[config] field checked and converted to its type by its entry in `FIELDS`
(`parse_fields`). `problem.py` builds Problem and Config from these.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any, Protocol, TypeGuard

from .errors import UsageError
from .knob_spec import SPEC, WORDS, names
from .models.hf_config import TASKS


class ReadsText(Protocol):
    """A Path, or an importlib resource."""

    def read_text(self) -> str: ...


OPTIMIZERS = ("sgd", "sgd_combined", "adam", "adamw", "lamb", "rmsprop")
TARGETS = ("mk1", "mk2", "bow")
TRAINERS = ("poptorch", "optimum")  # optimum_target.py


def read_toml(path: ReadsText, where: str, kind: str) -> dict[str, Any]:
    """A TOML file's tables, or a one-line UsageError naming the file (and line) and the fix.

    `path` is a Path or an importlib resource; `kind` names what the file should be.
    """
    try:
        text = path.read_text()
        return tomllib.loads(text)
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not a text file; {kind} is TOML") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(toml_error(where, exc, text)) from None


def toml_error(where: Any, exc: Exception, text: str) -> str:
    """'FILE: malformed TOML: <what> (at line N, column M)', with a line even at end of file."""
    msg = str(exc)
    if "at end of document" in msg:
        lines = max(1, len(text.splitlines()))
        msg = msg.replace(
            "at end of document", f"at line {lines}, end of file: something is left open"
        )
    return f"{where}: malformed TOML: {msg}"


# --- field parsing -------------------------------------------------------------------------


class _Expected(ValueError):
    """What a field's value must be: the end of "'KEY' must be ..." (parse_fields)."""


Check = Callable[[Any], Any]


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _one_of(choices: Iterable[str]) -> Check:
    words = tuple(choices)

    def check(value: Any) -> Any:
        if value not in words:
            raise _Expected("one of " + ", ".join(repr(c) for c in words))
        return value

    return check


def _whole(least: int) -> Check:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Expected("a whole number")
        if value < least:
            raise _Expected("0 or more" if least == 0 else "a positive whole number")
        return value

    return check


def _positive(value: Any) -> float:
    if not _is_number(value) or not value > 0:
        raise _Expected("a positive number")
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Expected("true or false")
    return value


def _model(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Expected("a model name")
    return value


def _dropout(value: Any) -> float:
    if not _is_number(value) or not 0 <= value < 1:
        raise _Expected("a probability from 0 up to 1, e.g. 0.0 (Graphcore's BERT pretraining)")
    return float(value)


def _speedups(value: Any) -> tuple[float, ...]:
    if (
        not isinstance(value, list)
        or len(value) > 4
        or not all(_is_number(v) and v > 0 for v in value)
    ):
        raise _Expected(
            "up to four positive numbers: the loader's speed-ups at 1, 2, 4 and 8 workers"
        )
    return tuple(float(v) for v in value)


def _loss_scaling(value: Any) -> float | str:
    if value == "auto":
        return "auto"
    if not _is_number(value) or not value > 0:
        raise _Expected('a positive number or "auto"')
    return float(value)


def _shape(value: Any) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise _Expected("a list of positive whole numbers, e.g. [3, 224, 224]")
    return tuple(value)


def _paths(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _Expected('a list of module paths, e.g. ["layer3.8"]')
    return tuple(value)


def _proportions(value: Any) -> tuple[float, ...]:
    values = [value] if _is_number(value) else value
    if not isinstance(values, list) or not all(_is_number(v) for v in values):
        raise _Expected("a list of numbers in (0, 1], one per IPU")
    return tuple(float(v) for v in values)


def _inputs(value: Any) -> tuple[str, ...]:
    from .models.inputs import parse_inputs  # imports torch: only for a file that names inputs

    if not isinstance(value, list):
        raise _Expected(
            'a list of inputs, e.g. ["input_ids:128:int64", "attention_mask:128:int64"]'
        )
    return parse_inputs(value)


def _or_none(check: Check) -> Check:
    """`check`, with None a value too (a field whose default is None)."""

    def checked(value: Any) -> Any:
        return None if value is None else check(value)

    return checked


#: the Problem's whole-number fields, with the smallest each takes (the knobs': the spec's)
_PROBLEM_INTS = {
    "batch_size": 1,
    "num_classes": 1,
    "ipus": 1,
    "global_batch": 1,
    "dataset_size": 1,
    "max_global_batch": 1,
    "seq_len": 1,
    "decoder_seq_len": 0,
    "max_predictions": 0,
}
_OPTIONAL = ("global_batch", *(k.name for k in SPEC if k.optional))

#: each [problem] and [config] key's check: the value as read from a file or a record, or _Expected
FIELDS: dict[str, Check] = {
    **{
        key: _one_of(words)
        for key, words in {
            "optimizer": OPTIMIZERS,
            "target": TARGETS,
            "trainer": TRAINERS,
            "task": TASKS,
            **WORDS,
        }.items()
    },
    **{
        key: _or_none(_whole(least)) if key in _OPTIONAL else _whole(least)
        for key, least in {
            **_PROBLEM_INTS,
            **{k.name: k.least for k in SPEC if k.kind == "int"},
        }.items()
    },
    **{key: _flag for key in names("bool")},
    "model": _model,
    "inputs": _inputs,
    "input_shape": _shape,
    "attention_dropout": _or_none(_dropout),
    "host_memory_gb": _positive,
    "host_float_sample_s": _or_none(_positive),
    "host_uint8_sample_s": _or_none(_positive),
    "host_worker_speedups": _speedups,
    "loss_scaling": _loss_scaling,
    "splits": _paths,
    "checkpoints": _paths,
    "available_memory_proportion": _proportions,
}


def parse_fields(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    """The fields of a Problem or Config (`cls`) from a [problem]/[config] table, each checked
    and converted; a one-line UsageError naming the key and what it must be."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a table")
    known = [f.name for f in fields(cls)]
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            fix = f"; did you mean '{hint[0]}'?" if hint else f"; known keys: {', '.join(known)}"
            raise UsageError(f"{where}: unknown key '{key}'{fix}")
        try:
            values[key] = FIELDS[key](value)
        except _Expected as exc:
            raise UsageError(f"{where}: '{key}' must be {exc}, got {value!r}") from None
    return values
