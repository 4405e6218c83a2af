"""A trial's stored record checked against the Config/Measurement schema as it is read.

Anyone who can write to a shared study can write a trial's record, so a record is input: a
field of the wrong type or an unknown enum value makes that trial unreadable, with a
one-line reason naming the trial and the field, and the rest of the study still reads.
The config is checked by `Config.from_dict` (parsing.py, as for a config file); the
measurement by its dataclass's field types, so a field added later is checked too.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from ..errors import UsageError
from ..measurement import FAILURE_KINDS, SOURCES, Measurement
from ..problem import Config

#: what each field must be where its type alone does not say it
_MEASUREMENT_CHOICES = {"source": SOURCES, "failure": FAILURE_KINDS}
#: per-IPU lists the tables index by one another's positions: these always of one length, ...
_PER_IPU = ("required_bytes", "capacity_bytes")
#: ... these either as long or empty (not measured)
_PER_IPU_OPTIONAL = ("max_tile_bytes", "breakdown")
#: longest stored value quoted in a reason
_QUOTE = 60


class UnreadableRecord(UsageError):
    """A stored trial record that does not match the schema; the message is one line:
    'trial 3 measurement: 'source' must be one of ..., got 5'."""


def check_record(rec: Any, number: int) -> tuple[Config, Measurement, str, float]:
    """(config, measurement, origin, seconds) of trial `number`'s stored record, or
    UnreadableRecord naming the trial and the field that is wrong."""
    where = f"trial {number}"
    if not isinstance(rec, dict):
        raise UnreadableRecord(f"{where}: its record must be a table, got {_quote(rec)}")
    try:
        config = Config.from_dict(rec["config"], f"{where} config")
    except UsageError as exc:
        raise UnreadableRecord(str(exc)) from None
    except (TypeError, ValueError) as exc:  # a value the parser let through that Config refuses
        raise UnreadableRecord(f"{where} config: {exc}") from None
    measurement = measurement_from_record(rec["measurement"], f"{where} measurement")
    origin = rec.get("origin", "sampled")
    if not isinstance(origin, str):
        raise UnreadableRecord(f"{where}: 'origin' must be text, got {_quote(origin)}")
    seconds = rec.get("seconds", 0.0)
    if not _fits(seconds, float):
        raise UnreadableRecord(f"{where}: 'seconds' must be a number, got {_quote(seconds)}")
    return config, measurement, origin, float(seconds)


def measurement_from_record(data: Any, where: str) -> Measurement:
    """A Measurement from its stored dict, every known field checked against its type (keys
    it does not know are left out, as `Measurement.from_dict` does)."""
    if not isinstance(data, dict):
        raise UnreadableRecord(f"{where}: expected a table, got {_quote(data)}")
    hints = typing.get_type_hints(Measurement)
    for key in ("feasible", "source"):
        if key not in data:
            raise UnreadableRecord(f"{where}: missing key '{key}'")
    for key, value in data.items():
        if key not in hints:
            continue
        if not _fits(value, hints[key]):
            raise UnreadableRecord(
                f"{where}: '{key}' must be {_describe(hints[key])}, got {_quote(value)}"
            )
        if (
            key in _MEASUREMENT_CHOICES
            and value is not None
            and value not in _MEASUREMENT_CHOICES[key]
        ):
            choices = ", ".join(repr(c) for c in _MEASUREMENT_CHOICES[key])
            raise UnreadableRecord(
                f"{where}: '{key}' must be one of {choices}, got {_quote(value)}"
            )
    lengths = {k: len(data.get(k, [])) for k in _PER_IPU}
    lengths.update({k: len(data[k]) for k in _PER_IPU_OPTIONAL if data.get(k)})
    if len(set(lengths.values())) > 1:
        raise UnreadableRecord(
            f"{where}: the per-IPU lists differ in length "
            f"({', '.join(f'{k} {n}' for k, n in lengths.items())})"
        )
    # The figures a verdict divides by (Measurement.verdict, .violation).
    if data.get("max_tile_bytes") and not data.get("tile_capacity_bytes", 0) > 0:
        raise UnreadableRecord(
            f"{where}: 'tile_capacity_bytes' must be positive with 'max_tile_bytes', "
            f"got {_quote(data.get('tile_capacity_bytes'))}"
        )
    if not 0 <= data.get("headroom", 0.0) < 1:
        raise UnreadableRecord(
            f"{where}: 'headroom' must be from 0 up to 1, got {_quote(data['headroom'])}"
        )
    return Measurement.from_dict(data)


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of the annotated type (a whole number is a number too)."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_fits(value, a) for a in args)
    if origin in (list, tuple):
        if not isinstance(value, list):  # JSON has lists only
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(
                _fits(v, a) for v, a in zip(value, args, strict=True)
            )
        return all(_fits(v, args[0]) for v in value) if args else True
    if origin is dict:
        return isinstance(value, dict) and all(
            _fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items()
        )
    raise AssertionError(f"record_schema has no check for a Measurement field of type {hint}")


def _describe(hint: Any) -> str:
    names = {
        bool: "true or false",
        int: "a whole number",
        float: "a number",
        str: "text",
        Any: "any value",
    }
    if hint in names:
        return names[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join("null" if a is type(None) else _describe(a) for a in args)
    if origin in (list, tuple):
        return f"a list of ({_describe(args[0])})" if args else "a list"
    if origin is dict:
        return f"a table of ({_describe(args[1])})"
    return str(hint)


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _QUOTE else text[:_QUOTE] + "…"
