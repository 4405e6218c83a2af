"""The command line's parser: each command's flags generated from its options' fields
(table.py), and the options built from the parsed flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from .shared import CommandOptions
from .spec import defaults, specs
from .table import OPTIONS
from .values import BadValue, Check


def _argparse_type(check: Check) -> Callable[[str], Any]:
    """A field's check (Spec.check) as an argparse type: its refusal is argparse's one-line
    message."""

    def parse(text: str) -> Any:
        try:
            return check(text)
        except BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = getattr(check, "__name__", "value")  # argparse names the type in its messages
    return parse


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """The flags of an options class (table.py): each field's flag, its default the field's."""
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
            target = groups.get(spec.group) or groups.setdefault(
                spec.group, parser.add_argument_group(spec.group)
            )
        else:
            target = parser
        kwargs: dict[str, Any] = {
            "dest": name,
            "help": argparse.SUPPRESS if spec.hidden else spec.help,
        }
        if spec.kind == "switch":
            kwargs["action"] = "store_true"
        else:
            kwargs["default"] = None if spec.kind == "repeat" else default.get(name)
            kwargs.update(
                {k: v for k, v in (("metavar", spec.metavar), ("choices", spec.choices)) if v}
            )
            if spec.kind == "repeat":
                kwargs["action"] = "append"
            if spec.check is not None:
                kwargs["type"] = _argparse_type(spec.check)
            if spec.required:
                kwargs["required"] = True
        target.add_argument(*spec.flags, **kwargs)


def options_from(namespace: argparse.Namespace) -> CommandOptions:
    """The command's options from its parsed flags."""
    cls = OPTIONS[namespace.command]
    names = {f.name for f in fields(cls)}
    values = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in vars(namespace).items()
        if k in names and v is not None
    }
    return cls(**values)
