"""Partials: Linear/Conv layers whose FP16 partial sums could leave the range or swamp."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import UsageError
from .answer import LayerPartials, PartialsAdvice
from .fp16 import FP16_MANTISSA_BITS, FP16_MAX, format_percent
from .running import MATMUL_LAYERS, cpu_threads, first_line, preserved

#: the layers MATMUL_LAYERS names, as a type
MatmulLayer = nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d

#: partial sums are bounded by sum|x*w|; flag a layer when the bound passes FP16_MAX / 16
#: (same 16x growth margin as the loss scale).
PARTIALS_RANGE_LIMIT = FP16_MAX / 16
#: flag a layer when more than this share of its outputs would swamp (see partials_advice).
PARTIALS_SWAMP_TOLERANCE = 0.01


def _accumulation_length(m: MatmulLayer) -> int:
    if isinstance(m, nn.Linear):
        return m.in_features
    return (m.in_channels // m.groups) * math.prod(m.kernel_size)


def _abs_sums(m: MatmulLayer, x: torch.Tensor) -> torch.Tensor:
    """sum_k |x_k w_k| per output: the same layer on |x| with |w| and no bias."""
    if isinstance(m, nn.Linear):
        return F.linear(x.abs(), m.weight.abs())
    sums: torch.Tensor = m._conv_forward(x.abs(), m.weight.abs(), None)
    return sums


def _without_bias(m: MatmulLayer, y: torch.Tensor) -> torch.Tensor:
    if m.bias is None:
        return y
    if isinstance(m, nn.Linear):
        return y - m.bias
    return y - m.bias.view(1, -1, *([1] * (y.dim() - 2)))


def _layer_partials(name: str, m: MatmulLayer, x: torch.Tensor, y: torch.Tensor) -> LayerPartials:
    k = _accumulation_length(m)
    s = _abs_sums(m, x)
    y = _without_bias(m, y).abs()
    # Swamping: a term smaller than half an ulp of the running sum is lost. The mean term is
    # s/k and the running sum ends near |y|, so terms vanish when s/k < |y| * 2^-11 (this
    # needs k > 2048 and sums that do not cancel, e.g. positive inputs into positive weights).
    swamped = (s > 0) & (s / k < y * 2.0 ** -(FP16_MANTISSA_BITS + 1))
    return LayerPartials(
        name,
        k,
        float(s.max()) if s.numel() else 0.0,
        float(y.max()) if y.numel() else 0.0,
        float(swamped.float().mean()) if s.numel() else 0.0,
    )


def partials_advice(
    model: nn.Module,
    sample_inputs: torch.Tensor,
    *,
    range_limit: float = PARTIALS_RANGE_LIMIT,
    swamp_tolerance: float = PARTIALS_SWAMP_TOLERANCE,
) -> PartialsAdvice:
    """Recommend "half" partials unless a Linear/Conv layer's partial sums could overflow or swamp
    in FP16.

    One forward pass (train mode, state restored) with hooks: a layer is risky when
    max sum|x*w| > range_limit (partial sums could pass FP16_MAX / 16), or when more than
    `swamp_tolerance` of its outputs swamp (long accumulations that do not cancel).
    """
    found: list[LayerPartials] = []

    def on_forward(name: str) -> Callable[[nn.Module, tuple[Any, ...], object], None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: object) -> None:
            if args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
                found.append(
                    _layer_partials(
                        name, cast(MatmulLayer, module), args[0].float(), output.float()
                    )
                )

        return hook

    handles = [
        m.register_forward_hook(on_forward(n))
        for n, m in model.named_modules()
        if isinstance(m, MATMUL_LAYERS)
    ]
    try:
        with cpu_threads(), preserved(model), torch.no_grad():
            model.train()
            try:
                model(sample_inputs)
            except Exception as exc:
                raise UsageError(
                    f"the model failed on inputs of shape {list(sample_inputs.shape)} "
                    f"({first_line(exc)}); check --input-shape"
                ) from None
    finally:
        for h in handles:
            h.remove()
    return _partials_verdict(found, range_limit, swamp_tolerance)


def _partials_verdict(
    found: list[LayerPartials], range_limit: float, swamp_tolerance: float
) -> PartialsAdvice:
    layers = _merge(found)
    if not layers:
        return PartialsAdvice("half", [], "no Linear or Conv layers: partials do not matter")
    risky, why = [], []
    for lp in layers:
        if lp.max_partial_sum > range_limit:
            why.append(
                f"{lp.name} (partial sums up to {lp.max_partial_sum:.3g} > {range_limit:.0f})"
            )
        elif lp.swamped > swamp_tolerance:
            why.append(
                f"{lp.name} (accumulates {lp.accumulation} terms without cancelling: "
                f"{format_percent(lp.swamped)} of outputs swamp)"
            )
        else:
            continue
        risky.append(lp)
    if risky:
        shown = "; ".join(why[:3]) + (f"; and {len(why) - 3} more" if len(why) > 3 else "")
        reason = f"{len(risky)} layer{'s' if len(risky) > 1 else ''} risk FP16 partials: {shown}"
        return PartialsAdvice("float", [lp.name for lp in risky], reason, risky)
    longest = max(layers, key=lambda lp: lp.accumulation)
    top = max(layers, key=lambda lp: lp.max_partial_sum)
    reason = (
        f"no layer at risk: partial sums stay below {top.max_partial_sum:.3g} ({top.name}); "
        f"longest accumulation {longest.accumulation} ({longest.name}) cancels enough not to swamp"
    )
    return PartialsAdvice("half", [], reason, [longest] if longest is top else [longest, top])


def _merge(found: list[LayerPartials]) -> list[LayerPartials]:
    """One entry per layer (a layer called twice keeps its worst figures), in call order."""
    merged: dict[str, LayerPartials] = {}
    for lp in found:
        old = merged.get(lp.name)
        merged[lp.name] = (
            lp
            if old is None
            else dataclasses.replace(
                old,
                max_partial_sum=max(old.max_partial_sum, lp.max_partial_sum),
                max_output=max(old.max_output, lp.max_output),
                swamped=max(old.swamped, lp.swamped),
            )
        )
    return list(merged.values())
