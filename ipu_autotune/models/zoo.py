"""Build the user's model: a torchvision classification model by name, `package.module:factory`,
or `object:NAME`, an object given to the Python API (objects.py).

No weights are ever downloaded. Tracing builds on the `meta` device (no memory used); the
numerics check builds on the CPU with the model's real random initialisation.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import torch
from torch import nn

from ..errors import UsageError
from . import objects


@lru_cache(maxsize=1)
def torchvision_models() -> tuple[str, ...]:
    import torchvision.models as tvm

    return tuple(sorted(tvm.list_models(module=tvm)))


def check_model_name(name: str) -> None:
    """Fail early, with suggestions, for a name neither torchvision's nor a module:factory."""
    if objects.is_object(name):
        objects.registered(name)
        return
    if name.startswith("hf:"):
        from .hf import architecture

        architecture(name)
        return
    if ":" in name:
        module, _, attr = name.partition(":")
        if not module or not attr:
            raise UsageError(f"model '{name}': write a factory as package.module:function")
        return
    if name not in torchvision_models():
        close = difflib.get_close_matches(name, torchvision_models(), n=3, cutoff=0.6)
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else (
                "; use a torchvision classification model name (e.g. resnet50) or "
                "package.module:factory"
            )
        )
        raise UsageError(f"unknown model '{name}'{hint}")


def _factory(name: str) -> Callable[[int], nn.Module]:
    if ":" not in name:
        import torchvision.models as tvm

        return lambda num_classes: tvm.get_model(name, weights=None, num_classes=num_classes)
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"model '{name}': cannot import {module_name} ({exc}); "
            "is it installed or on PYTHONPATH?"
        ) from None
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"model '{name}': {module_name} has no attribute '{attr}'") from None
    if not callable(fn):
        raise UsageError(f"model '{name}': {attr} is not callable")
    try:
        takes_classes = "num_classes" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_classes = False
    return (lambda n: fn(num_classes=n)) if takes_classes else (lambda n: fn())


def build_model(
    name: str,
    num_classes: int,
    device: str | torch.device = "meta",
    task: str = "",
    **hf_options: Any,
) -> nn.Module:
    """The user's model, with its own initialisation, in training mode, on `device`."""
    check_model_name(name)
    if name.startswith("hf:"):
        from .hf import build_hf_model

        model: nn.Module = build_hf_model(name, task, num_classes, device, **hf_options)
        return model
    if objects.is_object(name):
        return objects.build(objects.registered(name), device).train()
    factory = _factory(name)
    model = objects.construct(
        lambda: factory(num_classes), torch.device(device), f"model '{name}': the factory"
    )
    return model.train()
