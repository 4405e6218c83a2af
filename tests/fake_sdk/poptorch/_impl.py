"""Helpers of `python/_impl.py`: Python-raised PopTorch errors and the wrapped-model marker."""

from __future__ import annotations

from .poptorch_core import Error


def createPoptorchError(msg: str) -> Error:
    """Errors raised from Python carry their fields on the instance, type "poptorch_py_error"."""
    error = Error(f"'poptorch_py_error': {msg}")
    error.type = "poptorch_py_error"
    error.message = msg
    error.location = ""
    return error


def isWrapped(model) -> bool:
    return bool(getattr(type(model), "_poptorch_wrapped", False))
