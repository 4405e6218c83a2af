"""The Python API's typed options: a call passes a command's options object (`TuneOptions`, ...)
and/or keywords, the fields by name (`batch_size=64`). Keywords are a convenience over the
object: each sets its field, the value checked as the field's flag is (a Python value as it
is, a string as the flag's text), and an unknown, missing or clashing one is refused with the
parser's one-line message. No value is written out as flag text and parsed again.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

from ..errors import UsageError
from .shared import CommandOptions
from .spec import Spec, keywords, specs
from .table import OPTIONS

_Options = TypeVar("_Options", bound=CommandOptions)


def with_keywords(
    cls: type[_Options], model: str | None, given: dict[str, Any], base: _Options | None = None
) -> _Options:
    """`base` (default: the command's defaults) with the model and the keywords' values."""
    prog = f"ipu-autotune {cls.command}"
    if base is not None and not isinstance(base, cls):
        raise UsageError(f"{prog}: options must be a {cls.__name__}, got {type(base).__name__}")
    allowed = keywords(cls)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise UsageError(
            f"{prog}: unknown keyword '{unknown[0]}'; the keywords are the command's flags "
            f"with '_' for '-': {', '.join(sorted(allowed))}"
        )
    values = {key: value for key, value in given.items() if value is not None}  # None: not given
    own = {f.name for f in fields(cls)}
    if model is not None and "model" in own:
        values["model"] = model
    current = {
        **({f.name: getattr(base, f.name) for f in fields(cls)} if base is not None else {}),
        **values,
    }
    _refuse_clashes(prog, specs(cls), [*(k for k in current if k not in values), *values], current)
    _refuse_missing(prog, specs(cls), current)
    return replace(base, **values) if base is not None else cls(**values)


def _refuse_clashes(
    prog: str, all_specs: dict[str, Spec], order: list[str], current: dict[str, Any]
) -> None:
    """Two options of one exclusive group (--input-shape, --image-size): the later one is
    refused, as the parser refuses the later flag."""
    seen: dict[str, str] = {}
    for name in order:
        spec = all_specs.get(name)
        if spec is None or not spec.exclusive or current.get(name) in (None, False):
            continue
        if spec.exclusive in seen:
            raise spec.refusal(
                prog,
                f"not allowed with argument {'/'.join(all_specs[seen[spec.exclusive]].flags)}",
            )
        seen[spec.exclusive] = name


def _refuse_missing(prog: str, all_specs: dict[str, Spec], current: dict[str, Any]) -> None:
    missing = [s for name, s in all_specs.items() if s.required and current.get(name) is None]
    if missing:
        names = ", ".join("/".join(s.flags) or "model" for s in missing)
        raise UsageError(
            f"{prog}: the following arguments are required: {names} (see {prog} --help)"
        )


def from_keywords(command: str, model: str | None, given: dict[str, Any]) -> CommandOptions:
    """`command`'s options from a Python call's keywords alone."""
    return with_keywords(OPTIONS[command], model, given)


def keyword_specs(command: str) -> dict[str, Spec]:
    """The keywords a Python call of `command` takes: its documented flags, by field name."""
    return keywords(OPTIONS[command])
