"""Backends measure configurations; `commands/common.make_backend` picks one by name."""

from __future__ import annotations

import importlib.util

from ..errors import UsageError
from .base import Backend, Measurement

BACKENDS = ("auto", "estimate", "poptorch")


def sdk_available() -> bool:
    """True where the Poplar SDK's PopTorch can be imported."""
    return importlib.util.find_spec("poptorch") is not None


def resolve_backend_name(name: str) -> str:
    if name == "auto":
        return "poptorch" if sdk_available() else "estimate"
    if name == "poptorch" and not sdk_available():
        raise UsageError(
            "--backend poptorch needs the Poplar SDK (import poptorch failed); "
            "enable the SDK (source its enable.sh) or use --backend estimate"
        )
    if name not in BACKENDS:
        raise UsageError(f"unknown backend '{name}'; use one of {', '.join(BACKENDS)}")
    return name


__all__ = ["Backend", "Measurement", "BACKENDS", "sdk_available", "resolve_backend_name"]
