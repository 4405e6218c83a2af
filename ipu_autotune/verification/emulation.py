"""The IPU's FP16 numerics on the CPU: values rounded to FP16 where the IPU stores them.

Rounding is IEEE round-to-nearest-even through torch's float16 cast: magnitudes from 65520
up become inf (overflow), magnitudes up to 2^-25 become zero (underflow), subnormals keep
fewer bits, as FP16 does. Computation between the roundings stays in FP32: the CPU's matmuls
and convolutions accumulate in FP32, so half partials are not emulated (the `numerics`
advice's partials check, range and swamping per layer, stands for them).

`stochastic_fp16` rounds up or down at random with the probability given by the distance to
the two FP16 neighbours (the IPU's stochastic rounding, done here on the weight update only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from ..numerics.fp16 import FP16_MANTISSA_BITS, FP16_NORMAL_EXP


def to_fp16(x: torch.Tensor) -> torch.Tensor:
    """x rounded to FP16 (nearest, ties to even), kept in x's dtype."""
    return x.to(torch.float16).to(x.dtype)


def stochastic_fp16(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """x rounded to one of its two FP16 neighbours: up with probability (x - lower) / ulp."""
    mag = x.abs()
    _, exp = torch.frexp(mag)  # mag = m * 2^exp, m in [0.5, 1): floor(log2 mag) = exp - 1
    # below FP16's normal range the step is the subnormal one, 2^-24
    ulp = torch.ldexp(torch.ones_like(mag), (exp - 1).clamp(min=FP16_NORMAL_EXP) - FP16_MANTISSA_BITS)
    lower = torch.floor(mag / ulp) * ulp  # exact: ulp is a power of two
    up = torch.rand(x.shape, generator=generator) * ulp < mag - lower
    rounded = torch.where(up, lower + ulp, lower).copysign(x)
    return torch.where(torch.isfinite(x), to_fp16(rounded), x)


@dataclass
class RoundingCounts:
    """Gradient values rounded to FP16: how many were non-zero, and how many of those became 0 or inf."""

    nonzero: int = 0
    underflow: int = 0
    overflow: int = 0

    def add(self, before: torch.Tensor, after: torch.Tensor) -> None:
        finite_nonzero = (before != 0) & torch.isfinite(before)
        self.nonzero += int(finite_nonzero.sum())
        self.underflow += int((finite_nonzero & (after == 0)).sum())
        self.overflow += int((finite_nonzero & torch.isinf(after)).sum())

    @property
    def underflow_fraction(self) -> float:
        return self.underflow / self.nonzero if self.nonzero else 0.0

    @property
    def overflow_fraction(self) -> float:
        return self.overflow / self.nonzero if self.nonzero else 0.0


class _Fp16Boundary(torch.autograd.Function):
    """Identity up to FP16 rounding, both ways: the activation stored in FP16, and its gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, counts: RoundingCounts) -> torch.Tensor:
        ctx.counts = counts
        return to_fp16(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        rounded = to_fp16(grad)
        ctx.counts.add(grad, rounded)
        return rounded, None


@contextlib.contextmanager
def fp16_activations(model: nn.Module, counts: RoundingCounts) -> Iterator[None]:
    """Every leaf module's floating-point output, and the gradient flowing back into it, in FP16."""

    def hook(module, args, output):
        if isinstance(output, torch.Tensor) and output.is_floating_point():
            return _Fp16Boundary.apply(output, counts)
        return None

    handles = [m.register_forward_hook(hook) for m in model.modules() if not list(m.children())]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
