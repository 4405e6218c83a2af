"""The command line's parser: each command's flags generated from its options' fields
(table.py), and the options built from the parsed flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from .spec import defaults, specs
from .table import OPTIONS
from .values import BadValue


def _argparse_type(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """A field's check (Spec.convert) as an argparse type: its refusal is argparse's one-line
    message."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its messages
    return parse


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """The flags of an options class (options.py): each field's flag, its default the field's."""
    default = defaults(cls)
    groups: dict[str, Any] = {}
    for name, spec in specs(cls).items():
        if spec.kind == "positional":
            parser.add_argument(name, nargs=None if spec.required else "?", help=spec.help)
            continue
        if spec.exclusive:
            if spec.exclusive not in groups:
                groups[spec.exclusive] = parser.add_mutually_exclusive_group()
            target = groups[spec.exclusive]
        elif spec.group:
            target = groups.get(spec.group) or groups.setdefault(spec.group, parser.add_argument_group(spec.group))
        else:
            target = parser
        kwargs: dict[str, Any] = {"dest": name, "help": argparse.SUPPRESS if spec.hidden else spec.help}
        if spec.kind == "switch":
            kwargs["action"] = "store_true"
        else:
            kwargs["default"] = None if spec.kind == "repeat" else default.get(name)
            kwargs.update({k: v for k, v in (("metavar", spec.metavar), ("choices", spec.choices)) if v})
            if spec.kind == "repeat":
                kwargs["action"] = "append"
            if spec.convert is not None:
                kwargs["type"] = _argparse_type(spec.convert)
            if spec.required:
                kwargs["required"] = True
        target.add_argument(*spec.flags, **kwargs)


def options_from(namespace: argparse.Namespace, argv: list[str]):
    """The command's options from its parsed flags; `argv`: the command line (--jobs workers run it)."""
    cls = OPTIONS[namespace.command]
    names = {f.name for f in fields(cls)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(namespace).items()
              if k in names and v is not None}
    if "argv" in names:
        values["argv"] = tuple(argv)
    return cls(**values)
