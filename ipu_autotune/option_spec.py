"""A field of a run's options (options.py) is also a command-line flag and a keyword of the
Python API: `Spec` is what the field says about it (its flags, the check that turns text into
the value, its help). `args.add_options` builds the parser from it; `from_keywords` builds the
options from a call's keywords with the same checks and the same one-line messages as the
parser's, so the command and the call refuse bad input alike (exit code 2: `UsageError`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, TypeVar

from .errors import UsageError

_Options = TypeVar("_Options")


class BadValue(ValueError):
    """A flag's value refused, with the reason shown after the flag's name (argparse's
    ArgumentTypeError, which args.py turns it into)."""


@dataclass(frozen=True)
class Spec:
    """A field as an option. `kind`: value (one value), switch (a bool flag), repeat (a flag
    given once per item: a tuple), positional (the model). `with_model`: required exactly when
    the command requires the model (ClassVar `model_required`). `hardware`: a flag only where
    the command runs on IPUs (ClassVar `hardware`). `exclusive`: the flags naming one group
    exclude each other."""

    help: str | None = None
    flags: tuple[str, ...] = ()
    convert: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    kind: str = "value"
    required: bool = False
    with_model: bool = False
    hidden: bool = False
    group: str | None = None
    exclusive: str | None = None
    hardware: bool = False

    @property
    def option_strings(self) -> tuple[str, ...]:
        """The flags, as argparse names them."""
        return self.flags

    @property
    def long_flag(self) -> str:
        return next(f for f in self.flags if f.startswith("--"))

    def refusal(self, prog: str, why: str) -> UsageError:
        return UsageError(f"{prog}: argument {'/'.join(self.flags)}: {why} (see {prog} --help)")

    def parse(self, text: str, prog: str) -> Any:
        """The value of this flag's text, or the parser's one-line refusal."""
        if self.convert is None:
            return text
        try:
            return self.convert(text)
        except BadValue as exc:
            why = str(exc)
        except (TypeError, ValueError):  # as argparse words a plain type's refusal
            why = f"invalid {getattr(self.convert, '__name__', repr(self.convert))} value: {text!r}"
        raise self.refusal(prog, why)


def option(default: Any = None, help: str | None = None, **spec: Any) -> Any:
    """A field that is a flag (or with kind='positional', the model)."""
    return field(default=default, metadata={"option": Spec(help, **spec)})


def required(help: str | None = None, **spec: Any) -> Any:
    """A flag the command cannot run without (`--study` of export, say): a field without a
    default, so its type need not admit None. Keyword-only: it may follow fields with defaults."""
    return field(kw_only=True, metadata={"option": Spec(help, required=True, **spec)})


def switch(help: str | None = None, **spec: Any) -> Any:
    """A bool field that is a flag without a value."""
    return option(False, help, kind="switch", **spec)


def specs(cls: type) -> dict[str, Spec]:
    """The options of a command's options class, by field name, in field order; a field
    without a flag (a default the command takes as it is) is not among them."""
    out = {}
    for f in fields(cls):
        spec = f.metadata.get("option")
        if spec is None or (spec.hardware and not getattr(cls, "hardware", True)):
            continue
        required = spec.required or (spec.with_model and getattr(cls, "model_required", True))
        flags = spec.flags or (() if spec.kind == "positional" else ("--" + f.name.replace("_", "-"),))
        out[f.name] = replace(spec, flags=flags, required=required)
    return out


def defaults(cls: type) -> dict[str, Any]:
    """The fields' defaults, by name; a required field (`required`) has none."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def keywords(cls: type) -> dict[str, Spec]:
    """The keywords a Python call takes: the command's documented flags, by field name."""
    return {name: s for name, s in specs(cls).items() if s.kind != "positional" and not s.hidden}


def text(value: Any) -> str:
    """A Python value as the flag's text: (3, 32, 32) -> '3,32,32'; {'low': 8, 'high': 64} -> '8-64'."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, dict) and set(value) >= {"low", "high"}:
        return f"{value['low']}-{value['high']}"
    return str(value)


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


def flag_words(options: Any, names: Iterable[str]) -> list[str]:
    """The flags that give these options their values where they differ from the defaults,
    e.g. ['--headroom', '0.1', '--no-numerics']: a resume command's tail."""
    cls, all_specs = type(options), specs(type(options))
    default = defaults(cls)
    words: list[str] = []
    for name in names:
        value, spec = getattr(options, name), all_specs[name]
        if name in default and value == default[name]:
            continue
        words += [spec.long_flag] if spec.kind == "switch" else [spec.long_flag, text(value)]
    return words


# --- the checks a flag's text goes through ---------------------------------------------------

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
