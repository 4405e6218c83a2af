"""A field of a run's options (table.py) is also a command-line flag and a keyword of the
Python API: `Spec` is what the field says about it (its flags, the check its value goes
through, its help). parser.add_options builds the parser from it; the options check their
values with it (table.CommandOptions), with the parser's one-line messages, so the command and
the call refuse bad input alike (exit code 2: `UsageError`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from ..errors import UsageError
from .values import BadValue, Check, text


@dataclass(frozen=True)
class Spec:
    """A field as an option. `kind`: value (one value), switch (a bool flag), repeat (a flag
    given once per item: a tuple), positional (the model). `with_model`: required exactly when
    the command requires the model (ClassVar `model_required`). `hardware`: a flag only where
    the command runs on IPUs (ClassVar `hardware`). `exclusive`: the flags naming one group
    exclude each other."""

    help: str | None = None
    flags: tuple[str, ...] = ()
    check: Check | None = None  # None: text (values.text)
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

    def parse(self, value: object, prog: str) -> Any:
        """The option's value from the flag's text or a Python value (a repeated flag's: each
        item), or the parser's one-line refusal."""
        if self.kind == "switch":
            if not isinstance(value, bool):
                raise self.refusal(prog, f"takes True or False, got {value!r}")
            return value
        if self.kind == "repeat":
            items = value if isinstance(value, (list, tuple)) else [value]
            return tuple(self._checked(item, prog) for item in items)
        return self._checked(value, prog)

    def _checked(self, value: object, prog: str) -> Any:
        try:
            return (self.check or text)(value)
        except BadValue as exc:
            raise self.refusal(prog, str(exc)) from None


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
    out: dict[str, Spec] = {}
    for f in fields(cls):
        spec = f.metadata.get("option")
        if spec is None or (spec.hardware and not getattr(cls, "hardware", True)):
            continue
        required = spec.required or (spec.with_model and getattr(cls, "model_required", True))
        flags = spec.flags or (
            () if spec.kind == "positional" else ("--" + f.name.replace("_", "-"),)
        )
        out[f.name] = replace(spec, flags=flags, required=required)
    return out


def defaults(cls: type) -> dict[str, Any]:
    """The fields' defaults, by name; a required field (`required`) has none."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def keywords(cls: type) -> dict[str, Spec]:
    """The keywords a Python call takes: the command's documented flags, by field name."""
    return {name: s for name, s in specs(cls).items() if s.kind != "positional" and not s.hidden}
