"""Trace a model on the `meta` device into per-unit costs.

A *unit* is a place where a pipeline stage may begin (`poptorch.BeginBlock`): for ResNets the
stem, each bottleneck block and the head; for ViT the patch embedding, each encoder layer and
the head. One forward pass on meta tensors (no weights, no memory) records, per unit:
parameters, the bytes that cross into it, the bytes autograd saves for backward (split into
what matmul/conv keep and what cheap ops keep), forward FLOPs by kind and op counts.

Ops are attributed the way BeginBlock assigns them: everything that runs after a unit's
first module starts, up to the next unit, belongs to that unit.

The trace is FP32; FP16 halves activation bytes, which the estimator applies.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..models.forward_log import run_forward, tensor_bytes
from ..models.inputs import sample_batch
from ..models.zoo import build_model

# The profile's types, found here where profiles are made (re-exported: `X as X`)
from .attribution import attribute
from .model_profile import ModelProfile as ModelProfile, TraceLog as TraceLog, Unit as Unit

if TYPE_CHECKING:
    from ..problem import Problem

CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm)


def _is_stack(module: nn.Module) -> bool:
    children = list(module.children())
    return (
        isinstance(module, CONTAINERS)
        and len(children) >= 2
        and len({type(c) for c in children}) == 1
    )


def _holds_stack(module: nn.Module, depth: int = 2) -> bool:
    """A stack of repeated blocks lies within `depth` levels: a model body such as
    BertModel (`encoder.layer`) or GPT2Model (`h`), to be opened down to its blocks."""
    for child in module.children():
        if _is_stack(child) or (depth > 1 and _holds_stack(child, depth - 1)):
            return True
    return False


def _is_wrapper(module: nn.Module) -> bool:
    """A module around one model (a loss or input-normalisation wrapper): look inside."""
    with_params = [c for c in module.children() if any(True for _ in c.parameters())]
    return len(with_params) == 1


#: residual blocks recognisable by class name (their forward adds a shortcut)
_RESIDUAL_BLOCKS = ("BasicBlock", "Bottleneck", "ResBottleneckBlock", "ResBasicBlock")


def _has_skip(module: nn.Module) -> bool:
    """A block whose forward adds a skip connection around its children: kept whole as one
    unit (a split inside it cuts it where it lands, and what the skip carries crosses:
    profiles/refine.py). torchvision marks them with `use_res_connect` (InvertedResidual,
    MBConv) or a StochasticDepth child (MBConv, ConvNeXt's CNBlock)."""
    if getattr(module, "use_res_connect", False) or type(module).__name__ in _RESIDUAL_BLOCKS:
        return True
    return any(type(c).__name__ == "StochasticDepth" for c in module.children())


def _unit_candidates(model: nn.Module) -> list[str]:
    """Modules that are not broken down further: leaves, or blocks like a Bottleneck."""
    found: list[str] = []

    def visit(path: str, module: nn.Module, root: bool, repeated: bool = False) -> None:
        children = list(module.named_children())
        expand = (
            children
            and not _has_skip(module)
            and (
                root
                or type(module) in CONTAINERS
                or _holds_stack(module)
                or (_is_wrapper(module) and not repeated)
            )
        )
        if not expand:
            found.append(path)
            return
        wrapped = _is_wrapper(module) and type(module) not in CONTAINERS
        stack = _is_stack(module)
        for name, child in children:
            # Inside a wrapper (loss, input normalisation) the wrapped model is opened up as
            # if it were the root: its blocks are where stages can begin.
            inner = wrapped and any(True for _ in child.parameters())
            visit(f"{path}.{name}" if path else name, child, inner, stack)

    visit("", model, True)
    return found


def _merges_into_previous(module: nn.Module) -> bool:
    """Norms, activations, pooling and dropout follow the op they belong to."""
    has_params = any(True for _ in module.parameters())
    return not has_params or isinstance(module, _NORMS)


def _embedding_group(previous: nn.Module, module: nn.Module) -> bool:
    """GPT-2's position embedding follows its token embedding: one unit, the embeddings."""
    return isinstance(previous, nn.Embedding) and isinstance(module, nn.Embedding)


def trace_model(
    model_name: str,
    batch_size: int,
    input_shape: tuple[int, ...],
    num_classes: int,
    task: str = "",
    seq_len: int = 0,
    inputs: tuple[str, ...] = (),
    hf_options: tuple[Any, ...] = (),
    decoder_seq_len: int = 0,
) -> ModelProfile:
    from ..problem import Problem

    start = time.perf_counter()
    problem = Problem(
        model_name,
        batch_size,
        input_shape=input_shape,
        num_classes=num_classes,
        task=task,
        seq_len=seq_len,
        inputs=inputs,
        decoder_seq_len=decoder_seq_len,
        **dict(hf_options),
    )
    model = build_model(
        model_name, num_classes, device="meta", task=problem.task, **dict(hf_options)
    )
    kwargs = sample_batch(problem, batch_size) if problem.token_inputs or problem.inputs else None
    profile = trace_module(model, batch_size, problem.input_shape, num_classes, model_name, kwargs)
    profile.trace_seconds = time.perf_counter() - start
    profile.task = problem.task
    return profile


def trace_module(
    model: nn.Module,
    batch_size: int,
    input_shape: tuple[int, ...],
    num_classes: int,
    name: str = "",
    inputs: dict[str, Any] | None = None,
) -> ModelProfile:
    """Trace an already built module. It must live on the meta device, in FP32.

    `inputs`: the forward's keyword arguments (several inputs, integer or float) instead of
    one float batch of `input_shape`."""
    start = time.perf_counter()
    x = inputs if inputs is not None else torch.empty((batch_size, *input_shape), device="meta")
    labels = torch.zeros(batch_size, dtype=torch.long, device="meta")
    events: list[Any] = []
    run_forward(model, x, labels, events)

    modules = dict(model.named_modules())
    order: list[str] = []
    for event in events:
        if event[0] == "enter" and event[1] not in order:
            order.append(event[1])
    position = {p: i for i, p in enumerate(order)}

    candidates = sorted(
        (c for c in _unit_candidates(model) if c in position), key=position.__getitem__
    )
    starts: list[str] = []
    for c in candidates:
        if not starts or not (
            _merges_into_previous(modules[c]) or _embedding_group(modules[starts[-1]], modules[c])
        ):
            starts.append(c)
    log = TraceLog(events, tuple(starts), frozenset(candidates), _trainable_tensors(model))
    units = attribute(log)
    _place_heads_with_their_weights(units)

    input_bytes = (
        x.numel() * 4 if isinstance(x, torch.Tensor) else sum(tensor_bytes(t) for t in x.values())
    )
    return ModelProfile(
        model=name or type(model).__name__,
        batch_size=batch_size,
        input_shape=tuple(input_shape),
        num_classes=num_classes,
        units=units,
        module_order=order,
        input_bytes=input_bytes,
        trace_seconds=time.perf_counter() - start,
        log=log,
    )


def _place_heads_with_their_weights(units: list[Unit]) -> None:
    """A tied unit takes the rest of its head along (BERT's `cls.predictions.transform` with
    `cls.predictions.decoder`): the units before it under the same top-level module."""
    for i, unit in enumerate(units):
        if unit.placed_with is None or unit.placed_with >= i:
            unit.placed_with = None
            continue
        top = unit.path.split(".")[0]
        if units[unit.placed_with].path.split(".")[0] == top:
            unit.placed_with = None  # tied within one top-level module: nothing to move
            continue
        j = i - 1
        while (
            j > unit.placed_with
            and units[j].path.split(".")[0] == top
            and units[j].placed_with is None
        ):
            units[j].placed_with = unit.placed_with
            j -= 1


def _trainable_tensors(model: nn.Module) -> tuple[tuple[str, int, int], ...]:
    """Each trainable tensor once (tied ones too), with the module that holds it."""
    counted: set[int] = set()
    out = []
    for path, module in model.named_modules():
        for p in module.parameters(recurse=False):
            key = p.untyped_storage()._cdata
            if p.requires_grad and key not in counted:
                counted.add(key)
                out.append((path, key, p.numel()))
    return tuple(out)


@lru_cache(maxsize=8)
def cached_trace(
    model_name: str,
    batch_size: int,
    input_shape: tuple[int, ...],
    num_classes: int,
    task: str = "",
    seq_len: int = 0,
    inputs: tuple[str, ...] = (),
    hf_options: tuple[Any, ...] = (),
    decoder_seq_len: int = 0,
) -> ModelProfile:
    """One trace per problem (model, micro-batch, inputs, classes, task) per process."""
    return trace_model(
        model_name,
        batch_size,
        tuple(input_shape),
        num_classes,
        task,
        seq_len,
        tuple(inputs),
        hf_options,
        decoder_seq_len,
    )


def profile_for(problem: Problem, micro_batch: int | None = None) -> ModelProfile:
    """The problem's model traced at its micro-batch, or at `micro_batch` (batch.micro_batch).
    Under --trainer optimum, with its units placed where the model's pipelined class puts them
    (profiles/optimum_placement.py, `optimum_placed`: e.g. DeBERTa's MLM transform on the last IPU,
    BART's decoder position embedding on IPU 0)."""
    key = (
        problem.model,
        micro_batch or problem.batch_size,
        tuple(problem.input_shape),
        problem.num_classes,
        problem.task,
        problem.seq_len,
        tuple(problem.inputs),
        problem.hf_options,
        problem.decoder_seq_len,
    )
    if getattr(problem, "trainer", None) == "optimum":
        return optimum_trace(*key)
    return cached_trace(*key)


@lru_cache(maxsize=8)
def optimum_trace(*key: Any) -> ModelProfile:
    """cached_trace's profile as optimum-graphcore's parallelize() places it (profile_for)."""
    from .optimum_placement import optimum_placed

    return optimum_placed(cached_trace(*key))
