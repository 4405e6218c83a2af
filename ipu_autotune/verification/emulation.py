"""The IPU's FP16 numerics on the CPU: every floating-point operation's output rounded to FP16.

`Fp16Mode` is a TorchDispatchMode: it sees every aten operation, those of modules and those
written in `forward` (`q @ k.T`, softmax, residual additions, means, the loss) and the
backward operations autograd runs, and rounds each floating-point result (and each tensor an
operation writes in place: batch-norm running statistics, in-place additions) to FP16, so that
an attention score above 65504 becomes inf and its softmax row NaN as on the IPU. Views are
not rounded (they share a rounded tensor's storage). Inside one operation the CPU computes in
FP32 and rounds once: that is float partials (the IPU's matmuls, convolutions and reductions
accumulate in FP32, then store FP16); half partials, FP16 accumulation, are not emulated (the
`numerics` advice's partials check, range and swamping per layer, stands for them).

Rounding is IEEE round-to-nearest-even through torch's float16 cast: magnitudes from 65520
up become inf (overflow), magnitudes up to 2^-25 become zero (underflow), subnormals keep
fewer bits, as FP16 does.

`stochastic_fp16` rounds up or down at random with the probability given by the distance to
the two FP16 neighbours (the IPU's stochastic rounding, done here on the weight update only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from ..numerics.fp16 import FP16_MANTISSA_BITS, FP16_NORMAL_EXP


def to_fp16(x: torch.Tensor) -> torch.Tensor:
    """x rounded to FP16 (nearest, ties to even), kept in x's dtype."""
    return x.to(torch.float16).to(x.dtype)


#: FP32 keeps 23 mantissa bits, FP16 10: the low 13 bits are what rounding to an FP16 normal drops
_DROPPED_BITS = 23 - FP16_MANTISSA_BITS


def _stochastic_small(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Stochastic rounding through the two neighbours, any magnitude (FP16 subnormals included)."""
    mag = x.abs()
    _, exp = torch.frexp(mag)  # mag = m * 2^exp, m in [0.5, 1): floor(log2 mag) = exp - 1
    # below FP16's normal range the step is the subnormal one, 2^-24
    ulp = torch.ldexp(
        torch.ones_like(mag), (exp - 1).clamp(min=FP16_NORMAL_EXP) - FP16_MANTISSA_BITS
    )
    lower = torch.floor(mag / ulp) * ulp  # exact: ulp is a power of two
    up = torch.rand(x.shape, generator=generator) * ulp < mag - lower
    return torch.where(up, lower + ulp, lower).copysign(x)


def stochastic_fp16(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """x (FP32) rounded to one of its two FP16 neighbours: up with probability (x - lower) / ulp.

    In FP16's normal range, by the bits: a random integer below 2^13 added to the FP32 value's
    bits carries into the bits FP16 keeps with exactly that probability (the magnitude grows for
    either sign), and the 13 dropped bits are then cleared; FP16 subnormals by the neighbours."""
    noise = torch.randint(0, 1 << _DROPPED_BITS, x.shape, generator=generator, dtype=torch.int32)
    bits = (x.view(torch.int32) + noise).bitwise_and_(-(1 << _DROPPED_BITS))
    rounded = bits.view(torch.float32)
    small = x.abs() < 2.0**FP16_NORMAL_EXP
    if bool(small.any()):  # the few values there, by the neighbours
        rounded[small] = _stochastic_small(x[small], generator)
    return torch.where(torch.isfinite(x), to_fp16(rounded), x)


#: magnitudes from here up round to inf in FP16
FP16_OVERFLOW = 65520.0
#: tensors above this many values have their zeros counted on every STRIDE-th value (a prime, so
#: that the sample walks across rows and channels); overflow is always looked for in every value
SAMPLE_ABOVE, STRIDE = 4096, 31


@dataclass
class RoundingCounts:
    """Values rounded to FP16: how many were non-zero, and how many of those became 0 or inf. Zeros
    of large tensors are counted on a systematic sample (1 in 31 values, scaled up): counting every
    value cost more than the rounding itself."""

    nonzero: float = 0
    underflow: float = 0
    overflow: float = 0

    def add(self, before: torch.Tensor, after: torch.Tensor) -> None:
        """`after` is `before` rounded: rounding never makes a zero non-zero nor an inf finite."""
        n = before.numel()
        if n == 0:
            return
        lo, hi = (float(v) for v in torch.aminmax(before))
        if not (
            -FP16_OVERFLOW < lo and hi < FP16_OVERFLOW
        ):  # an overflow, an inf or a NaN: every value
            inf_before = int(torch.isinf(before).sum())
            nonzero = int(torch.count_nonzero(before))
            self.nonzero += nonzero - inf_before
            self.underflow += nonzero - int(torch.count_nonzero(after))
            self.overflow += int(torch.isinf(after).sum()) - inf_before
            return
        weight = 1.0
        if n > SAMPLE_ABOVE:
            before, after = before.reshape(-1)[::STRIDE], after.reshape(-1)[::STRIDE]
            weight = n / before.numel()
        nonzero = int(torch.count_nonzero(before))
        self.nonzero += weight * nonzero
        self.underflow += weight * (nonzero - int(torch.count_nonzero(after)))

    @property
    def underflow_fraction(self) -> float:
        return self.underflow / self.nonzero if self.nonzero else 0.0

    @property
    def overflow_fraction(self) -> float:
        return self.overflow / self.nonzero if self.nonzero else 0.0


_FLOATS = (torch.float32, torch.float64)
_aten = torch.ops.aten
#: results that need no rounding: copies, casts and constants (already FP16 or exact), scalars out
_SKIP = {
    _aten.clone.default,
    _aten._to_copy.default,
    _aten.copy_.default,
    _aten.detach.default,
    _aten.empty.memory_format,
    _aten.empty_like.default,
    _aten.empty_strided.default,
    _aten.zeros.default,
    _aten.zeros_like.default,
    _aten.ones.default,
    _aten.ones_like.default,
    _aten.new_empty.default,
    _aten.new_zeros.default,
    _aten.lift_fresh.default,
    _aten.lift_fresh_copy.default,
    _aten._local_scalar_dense.default,
}
#: arguments an operation writes although its schema does not say so (batch norm's
#: running statistics)
_WRITES = {_aten.native_batch_norm.default: ((3, "running_mean"), (4, "running_var"))}


def _plan(func: Any) -> tuple[tuple[tuple[int, str], ...], tuple[int, ...], bool] | None:
    """What of `func`'s results to round: (the arguments it writes, as position and name),
    (its fresh results: those that alias no argument), whether it returns one tensor; None:
    nothing (a view)."""
    if func in _SKIP or func.is_view:
        return None
    schema = func._schema
    written = tuple(
        (i, a.name)
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ) + _WRITES.get(func, ())
    fresh = tuple(i for i, r in enumerate(schema.returns) if r.alias_info is None)
    if not written and not fresh:
        return None
    return written, fresh, len(schema.returns) == 1


class Fp16Mode(TorchDispatchMode):
    """Every floating-point result rounded to FP16 (kept in its FP32 dtype). While `counting` (the
    trainer sets it for the backward pass), what the rounding flushed to zero or raised to inf is
    counted in `counts`."""

    def __init__(self, counts: RoundingCounts | None = None):
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.counts = counts
        self.counting = False
        self._plans: dict[Any, Any] = {}

    def _round(self, t: torch.Tensor) -> torch.Tensor:
        rounded = t.to(torch.float16).to(t.dtype)
        if self.counting and self.counts is not None:
            self.counts.add(t, rounded)
        return rounded

    def _rounded(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self._round(value) if value.dtype in _FLOATS else value
        if isinstance(value, (list, tuple)):
            return type(value)(self._rounded(v) for v in value)
        return value

    def _round_in_place(self, value: object) -> None:
        if isinstance(value, torch.Tensor):
            if value.dtype in _FLOATS:
                value.copy_(self._round(value))
        elif isinstance(value, (list, tuple)):
            for v in value:
                self._round_in_place(v)

    def __torch_dispatch__(
        self,
        func: Any,
        types: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            plan = self._plans[func]
        except KeyError:
            plan = self._plans[func] = _plan(func)
        if plan is None:
            return out
        written, fresh, single = plan
        for i, name in written:
            self._round_in_place(args[i] if i < len(args) else kwargs.get(name))
        if not fresh:
            return out
        if single:
            return self._rounded(out)
        return tuple(self._rounded(o) if i in fresh else o for i, o in enumerate(out))


@contextlib.contextmanager
def fp16_emulation(counts: RoundingCounts | None = None) -> Iterator[Fp16Mode]:
    """Every operation inside, forward and backward, rounds its results to FP16. Fused attention
    (scaled_dot_product_attention) runs as its separate operations (the math backend), so its
    scores are rounded too."""
    mode = Fp16Mode(counts)
    with sdpa_kernel([SDPBackend.MATH]), mode:
        yield mode
