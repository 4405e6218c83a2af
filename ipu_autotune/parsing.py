"""Reading the config files' values: TOML with one-line errors naming the file and line, the
allowed values of each word-valued key, and each [problem]/[config] field checked and
converted to its type (`parse_fields`). `problem.py` builds Problem and Config from these.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import fields
from typing import Any

from .errors import UsageError

# The knobs' kinds and allowed values are the knob spec's; re-exported here.
# the values each key allows are the knob spec's, found here with the rest (re-exported: `X as X`)
from .knob_spec import (
    EXECUTIONS as EXECUTIONS,
    LOADER_MODES as LOADER_MODES,
    PARTIALS as PARTIALS,
    PRECISIONS as PRECISIONS,
    RECOMPUTE_MODES as RECOMPUTE_MODES,
    SPEC,
    STATE_DTYPES as STATE_DTYPES,
    WORDS,
    names,
)

OPTIMIZERS = ("sgd", "sgd_combined", "adam", "adamw", "lamb", "rmsprop")
TARGETS = ("mk1", "mk2", "bow")
TRAINERS = ("poptorch", "optimum")  # optimum_target.py


def read_toml(path, where: str, kind: str) -> dict[str, Any]:
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
        msg = msg.replace("at end of document", f"at line {lines}, end of file: something is left open")
    return f"{where}: malformed TOML: {msg}"


# --- field parsing -------------------------------------------------------------------------

_CHOICES: dict[str, tuple[str, ...]] = {"optimizer": OPTIMIZERS, "target": TARGETS, "trainer": TRAINERS, **WORDS}
#: the Problem's whole-number fields, with the smallest each takes (the knobs': the spec's)
_PROBLEM_INTS = {"batch_size": 1, "num_classes": 1, "ipus": 1, "global_batch": 1, "dataset_size": 1,
                 "max_global_batch": 1, "seq_len": 1, "decoder_seq_len": 0, "max_predictions": 0}
_LEAST = {**_PROBLEM_INTS, **{k.name: k.least for k in SPEC if k.kind == "int"}}
_OPTIONAL = ("global_batch", *(k.name for k in SPEC if k.optional))


def parse_fields(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a table")
    known = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            fix = f"; did you mean '{hint[0]}'?" if hint else f"; known keys: {', '.join(known)}"
            raise UsageError(f"{where}: unknown key '{key}'{fix}")
        values[key] = _coerce(key, value, where)
    return values


def _coerce(key: str, value: Any, where: str) -> Any:
    def bad(expected: str) -> UsageError:
        return UsageError(f"{where}: '{key}' must be {expected}, got {value!r}")

    if key in _CHOICES:
        if value not in _CHOICES[key]:
            raise bad("one of " + ", ".join(repr(c) for c in _CHOICES[key]))
        return value
    if key == "task":
        from .models.hf import TASKS

        if value not in TASKS:
            raise bad("one of " + ", ".join(repr(t) for t in TASKS))
        return value
    if key == "inputs":
        from .models.inputs import parse_inputs

        if not isinstance(value, list):
            raise bad('a list of inputs, e.g. ["input_ids:128:int64", "attention_mask:128:int64"]')
        return parse_inputs(value)
    if key in ("model",):
        if not isinstance(value, str) or not value:
            raise bad("a model name")
        return value
    if key in names("bool"):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key in _LEAST:
        if value is None and key in _OPTIONAL:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("a whole number")
        zero_ok = _LEAST[key] == 0
        if zero_ok and value < 0 or not zero_ok and value < 1:
            raise bad("a positive whole number" if not zero_ok else "0 or more")
        return value
    if key == "attention_dropout":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise bad("a probability from 0 up to 1, e.g. 0.0 (Graphcore's BERT pretraining)")
        return float(value)
    if key in ("host_memory_gb", "host_float_sample_s", "host_uint8_sample_s"):
        if value is None and key != "host_memory_gb":
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise bad("a positive number")
        return float(value)
    if key == "host_worker_speedups":
        if not isinstance(value, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in value
        ) or len(value) > 4:
            raise bad("up to four positive numbers: the loader's speed-ups at 1, 2, 4 and 8 workers")
        return tuple(float(v) for v in value)
    if key == "loss_scaling":
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise bad('a positive number or "auto"')
        return float(value)
    if key in ("input_shape",):
        if not isinstance(value, list) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
        ):
            raise bad("a list of positive whole numbers, e.g. [3, 224, 224]")
        return tuple(value)
    if key in ("splits", "checkpoints"):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise bad('a list of module paths, e.g. ["layer3.8"]')
        return tuple(value)
    if key == "available_memory_proportion":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
        ):
            raise bad("a list of numbers in (0, 1], one per IPU")
        return tuple(float(v) for v in value)
    raise AssertionError(f"no parser for {key}")  # every dataclass field has one above
