"""The Python API's keywords: a call's keywords checked as the command's flags are, into the
command's options."""

from __future__ import annotations

from typing import Any, TypeVar

from ..errors import UsageError
from .spec import Spec, defaults, keywords, specs, text

_Options = TypeVar("_Options")


def _checked(cls: type, command: str, given: dict[str, Any]) -> dict[str, Spec]:
    allowed = keywords(cls)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise UsageError(f"ipu-autotune {command}: unknown keyword '{unknown[0]}'; the keywords are the "
                         f"command's flags with '_' for '-': {', '.join(sorted(allowed))}")
    return allowed


def to_argv(cls: type, command: str, model: str | None, given: dict[str, Any]) -> list[str]:
    """The command line these keywords stand for, e.g. ['tune', 'resnet50', '--batch-size=64']."""
    allowed = _checked(cls, command, given)
    argv = [command] + ([model] if model is not None else [])
    for key, value in given.items():
        spec = allowed[key]
        if value is None:
            continue
        if spec.kind == "switch":
            if not isinstance(value, bool):
                raise UsageError(f"ipu-autotune {command}: {key} takes True or False, got {value!r}")
            argv += [spec.long_flag] if value else []
        elif spec.kind == "repeat":
            argv += [f"{spec.long_flag}={text(v)}" for v in (value if isinstance(value, (list, tuple)) else [value])]
        else:
            argv.append(f"{spec.long_flag}={text(value)}")
    return argv


def from_keywords(cls: type[_Options], command: str, model: str | None, given: dict[str, Any]) -> _Options:
    """The options of a Python call: each keyword checked as its flag is (the value as the
    flag's text, through the same check), missing and clashing ones refused as the parser
    refuses them; `argv` is the command line the call stands for (--jobs workers run it)."""
    prog = f"ipu-autotune {command}"
    argv = to_argv(cls, command, model, given)  # refuses unknown keywords and non-bool switches
    allowed = keywords(cls)
    values: dict[str, Any] = {}
    for key, value in given.items():
        spec = allowed[key]
        if value is None or (spec.kind == "switch" and not value):
            continue
        if spec.kind == "repeat":
            items = value if isinstance(value, (list, tuple)) else [value]
            values[key] = tuple(spec.parse(text(v), prog) for v in items)
        elif spec.kind == "value":
            values[key] = spec.parse(text(value), prog)
        else:
            values[key] = True
        clash = next((k for k in values if k != key and spec.exclusive and allowed[k].exclusive == spec.exclusive),
                     None)
        if clash is not None:
            raise spec.refusal(prog, f"not allowed with argument {'/'.join(allowed[clash].flags)}")
    missing = [s for name, s in specs(cls).items() if s.required and
               (model is None if s.kind == "positional" else name not in values)]
    if missing:
        names = ", ".join("/".join(s.flags) or "model" for s in missing)
        raise UsageError(f"{prog}: the following arguments are required: {names} (see {prog} --help)")
    own = defaults(cls)  # model and argv have defaults
    values.update({k: v for k, v in (("model", model), ("argv", tuple(argv))) if k in own})
    return cls(**values)
