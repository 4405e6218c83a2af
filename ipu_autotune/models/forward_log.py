"""One training-mode forward on meta tensors, logged as events for the tracer.

Events, in order: ("enter", module path, bytes of its inputs, {input storage: bytes}),
("exit", module path), ("op", kind, FLOPs, output bytes, input bytes for conv/matmul),
("use", ((storage, bytes) read...), ((storage, bytes) written...)) for every op, views too
(what is live where a stage boundary cuts a block: profiles/refine.py), ("param", storage)
when an op reads a trainable parameter, and ("saved", producer kind, bytes) for each tensor
the backward pass keeps, as a PopART pipeline keeps it (no dropout masks).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from .hf import jit_like_tracing

_CONV_OPS = {"convolution", "_convolution", "conv2d", "conv1d", "conv3d"}
_MATMUL_OPS = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_attention_math",
}
_NORM_OPS = {
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit_no_training",
    "native_layer_norm",
    "native_group_norm",
}
# Metadata-only ops: no data moved, no code worth counting.
_VIEW_OPS = {
    "view",
    "_unsafe_view",
    "reshape",
    "t",
    "transpose",
    "permute",
    "expand",
    "squeeze",
    "unsqueeze",
    "detach",
    "alias",
    "slice",
    "select",
    "as_strided",
    "split",
    "unbind",
    "split_with_sizes",
    "chunk",
    "flatten",
    "_reshape_alias",
    "lift_fresh",
    "empty",
    "empty_like",
    "zeros",
    "ones",
    "new_empty",
    "new_zeros",
    "zeros_like",
    "ones_like",
    "empty_strided",
    "clone",
    "copy_",
    "_to_copy",
    "fill_",
    "normal_",
    "uniform_",
}


def op_kind(name: str) -> str:
    if name in _CONV_OPS:
        return "conv"
    if name in _MATMUL_OPS:
        return "matmul"
    if name in _NORM_OPS:
        return "norm"
    return "other"


def tensor_bytes(obj: object) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(o) for o in obj.values())
    return 0


def _flat_tensors(obj: object) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _flat_tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _flat_tensors(o)


# PopART saves no dropout mask for backward: DropoutGradOp is built from the forward
# DropoutOp with its random reference id and regenerates the same mask from the seed
# (popart willow/src/op/dropout.cpp, DropoutGradOp). PyTorch's CPU dropout saves its
# noise tensor (bernoulli_) for the backward multiply; those bytes are not saved on the IPU.
_RANDOM_MASK_OPS = {"bernoulli", "bernoulli_"}


def _storages(obj: object, skip: frozenset[Any]) -> tuple[tuple[int, int], ...]:
    """(storage key, bytes) of each tensor in `obj`, less those in `skip`."""
    out = {}
    for t in _flat_tensors(obj):
        key = t.untyped_storage()._cdata
        if key not in skip:
            out[key] = t.untyped_storage().nbytes()
    return tuple(out.items())


class _Recorder(TorchDispatchMode):
    """Logs, in order, each aten op with its kind, FLOPs, output bytes and input bytes."""

    def __init__(
        self,
        events: list[Any],
        param_storages: frozenset[Any] = frozenset(),
        constants: frozenset[Any] = frozenset(),
    ):
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.constants = constants  # parameters and buffers: never a tensor that crosses a stage
        self.events = events
        self.producer: dict[int, str] = {}  # output storage -> kind of the op that wrote it
        self.random_masks: set[int] = set()  # storages written by a dropout's mask draw
        # Every op's output stays alive (meta tensors: no memory) so no later tensor reuses its
        # storage key: a reused key would give a new tensor an old tensor's producer or mask.
        self._alive: list[Any] = []
        self.param_storages = param_storages

    def __torch_dispatch__(
        self,
        func: Any,
        types: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        masks: list[torch.Tensor] = []
        if name in _RANDOM_MASK_OPS:
            masks = list(_flat_tensors(out))
        elif name == "native_dropout":  # (output, mask)
            masks = [out[1]]
        for mask in masks:
            self.random_masks.add(mask.untyped_storage()._cdata)
        self._alive.append(out)
        self.events.append(
            ("use", _storages(args, self.constants), _storages(out, self.constants))
        )
        if self.param_storages:
            # A parameter belongs to the unit whose ops read it, called module or not.
            for t in _flat_tensors(args):
                key = t.untyped_storage()._cdata
                if key in self.param_storages:
                    self.events.append(("param", key))
        if name not in _VIEW_OPS:
            kind = op_kind(name)
            packet = func.overloadpacket
            flops = (
                flop_registry[packet](*args, **kwargs, out_val=out)
                if packet in flop_registry
                else 0
            )
            out_bytes = tensor_bytes(out)
            in_bytes = tensor_bytes(args) if kind in ("conv", "matmul") else 0
            self.events.append(("op", kind, float(flops), out_bytes, in_bytes))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.producer[t.untyped_storage()._cdata] = kind
        return out


def run_forward(
    model: nn.Module, x: torch.Tensor | dict[str, Any], labels: torch.Tensor, events: list[Any]
) -> None:
    """One training-mode forward plus loss, logging module entries, ops, parameter reads and
    saved tensors. `x` is the input batch, or the forward's keyword arguments."""
    trainable = frozenset(
        p.untyped_storage()._cdata for p in model.parameters() if p.requires_grad
    )
    param_storages = {p.untyped_storage()._cdata for p in model.parameters()}
    param_storages |= {b.untyped_storage()._cdata for b in model.buffers()}
    seen: set[int] = set()
    recorder = _Recorder(events, trainable, frozenset(param_storages))
    names = {m: n for n, m in model.named_modules()}

    def pre_hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        tensors = {
            t.untyped_storage()._cdata: t.numel() * t.element_size()
            for t in _flat_tensors((args, kwargs))
        }
        events.append(("enter", names[module], tensor_bytes(args) + tensor_bytes(kwargs), tensors))

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage()._cdata
        if key not in param_storages and key not in seen and key not in recorder.random_masks:
            seen.add(key)
            # What recomputing it would cost depends on the op that produced it.
            events.append(
                ("saved", recorder.producer.get(key, "input"), t.untyped_storage().nbytes())
            )
        return t

    def post_hook(module: nn.Module, args: tuple[Any, ...], output: object) -> None:
        events.append(("exit", names[module]))

    handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in model.modules()]
    handles += [m.register_forward_hook(post_hook) for m in model.modules()]
    try:
        with (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
            recorder,
            jit_like_tracing(),
        ):
            out = model(**x) if isinstance(x, dict) else model(x)
            if getattr(out, "loss", None) is not None or (
                isinstance(out, torch.Tensor) and out.dim() == 0
            ):
                return  # the model computed its own loss from the labels it was given
            if isinstance(out, (tuple, list)):
                out = out[0]
            elif not isinstance(out, torch.Tensor) and hasattr(out, "logits"):
                out = out.logits
            loss = nn.functional.cross_entropy(out.flatten(1) if out.dim() > 2 else out, labels)
            del loss
    finally:
        for h in handles:
            h.remove()
