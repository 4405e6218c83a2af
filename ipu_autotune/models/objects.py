"""Models given as Python objects (the Python API, `ipu_autotune.tune(model, ...)`): an
`nn.Module` instance or a zero-argument callable that builds one, held in this process.

The Problem stays a plain value: such a model is named `object:NAME` (NAME from `name=`,
else the model's class name), which goes into the study name and storage like any model
string; the object itself lives only in this registry. So a study of an object model can be
resumed from Python (pass the object again), never from the command line, which says so.
"""

from __future__ import annotations

import copy
import itertools
import pickle
import re
from collections.abc import Callable

import torch
from torch import nn

from ..errors import UsageError

PREFIX = "object:"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_REGISTRY: dict[str, nn.Module | Callable[[], nn.Module]] = {}


def is_object(model: str) -> bool:
    return model.startswith(PREFIX)


def register(model: nn.Module | Callable[[], nn.Module], name: str | None = None) -> str:
    """Hold `model` under `object:NAME` for this process and return that model string.
    The latest object given a name replaces an earlier one (a cell run again)."""
    if name is None:
        name = type(model).__name__ if isinstance(model, nn.Module) else _built_class_name(model)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(
            f"model name {name!r}: use letters, digits, '_', '.' or '-' (a Python identifier "
            "works), e.g. name='TinyNet'"
        )
    _REGISTRY[name] = model
    return PREFIX + name


def _built_class_name(factory: Callable[[], nn.Module]) -> str:
    """A factory's model is named after the class it builds (a lambda has no useful name)."""
    built = build(factory, "meta")
    return type(built).__name__


def registered(model: str) -> nn.Module | Callable[[], nn.Module]:
    try:
        return _REGISTRY[model[len(PREFIX) :]]
    except KeyError:
        raise UsageError(
            f"model '{model}' was a Python object in another session; pass the object to "
            "ipu_autotune.tune(...) again (with the same name=) to resume its study: the "
            "command line cannot rebuild it"
        ) from None


def build(obj: nn.Module | Callable[[], nn.Module], device: str | torch.device) -> nn.Module:
    """A fresh model on `device`: a copy of an instance (the user's own is never moved or
    trained), or what the factory builds (on meta too, as zoo builds a named model)."""
    device = torch.device(device)
    if isinstance(obj, nn.Module):
        return _copy(obj, device)
    if not callable(obj):
        raise UsageError(
            f"model: expected an nn.Module, a zero-argument callable that returns one, or a "
            f"model string, got {type(obj).__name__}"
        )
    return construct(obj, device, "model: the callable")


def construct(factory: Callable[[], nn.Module], device: torch.device, what: str) -> nn.Module:
    """`factory()` with `device` as the default device; `what` names it in the error."""
    try:
        with torch.device(device):
            model = factory()
    except NotImplementedError as exc:
        if "meta" not in str(exc) or device.type != "meta":
            raise
        # A constructor that computes its layout with tensors (torchvision's RegNet reads
        # block widths back with .tolist()) cannot run on meta: build on the CPU, then move.
        model = factory().to(device)
    if not isinstance(model, nn.Module):
        raise UsageError(f"{what} returned {type(model).__name__}, not an nn.Module")
    return model


def _copy(model: nn.Module, device: torch.device) -> nn.Module:
    try:
        if device.type != "meta":
            return copy.deepcopy(model).to(device)
        # On meta: the structure copied, every tensor replaced by an empty one of its shape,
        # so tracing a large instance costs no memory; a tied weight stays one tensor.
        memo: dict[int, torch.Tensor] = {}
        for t in itertools.chain(model.parameters(), model.buffers()):
            empty = torch.empty_like(t, device="meta")
            memo[id(t)] = (
                nn.Parameter(empty, requires_grad=t.requires_grad)
                if isinstance(t, nn.Parameter)
                else empty
            )
        return copy.deepcopy(model, memo)
    except Exception as exc:
        raise UsageError(
            f"model {type(model).__name__}: cannot copy it ({type(exc).__name__}: {exc}); pass a "
            "zero-argument function that builds it instead"
        ) from None


def pickled(model: str) -> bytes:
    """The model built on the CPU, pickled for the PopTorch backend's compile process.

    Pickle stores classes by module and name, so the compile process imports them; a class
    defined in a notebook (module `__main__`) cannot be imported there: refused, with the fix."""
    built = build(registered(model), "cpu")
    local = sorted({type(m).__name__ for m in built.modules() if type(m).__module__ == "__main__"})
    if local:
        raise UsageError(
            f"model '{model}': the PopTorch backend compiles in a separate process, which cannot "
            f"import {', '.join(local)} (defined in the notebook or script itself); move the "
            "class into a .py file next to it and import it from there"
        )
    try:
        return pickle.dumps(built)
    except Exception as exc:
        raise UsageError(
            f"model '{model}': cannot be pickled for the PopTorch backend's compile process "
            f"({type(exc).__name__}: {exc}); build it from importable classes"
        ) from None
