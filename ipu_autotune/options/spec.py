"""A field of a run's options (options.py) is also a command-line flag and a keyword of the
Python API: `Spec` is what the field says about it (its flags, the check that turns text into
the value, its help). `args.add_options` builds the parser from it; `from_keywords` builds the
options from a call's keywords with the same checks and the same one-line messages as the
parser's, so the command and the call refuse bad input alike (exit code 2: `UsageError`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from ..errors import UsageError
from .values import BadValue


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
