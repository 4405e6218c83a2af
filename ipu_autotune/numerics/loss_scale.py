"""Loss scale: the largest power of two that keeps the largest gradient well inside FP16's range,
and what each scale does to the observed gradients (flushed, subnormal, overflow)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from .answer import LOSS_SCALE_MARGIN, LossScaleAdvice, LossScaleRow
from .fp16 import (
    EXPONENT_BINS,
    FP16_MAX,
    FP16_MIN_EXP,
    FP16_NORMAL_EXP,
    format_percent,
    format_scale,
)
from .statistics import GradientStats

#: "auto" when max|g| (or the median |g|) moves more than this many binades across the steps:
#: half of the margin would be gone within 3 steps.
DRIFT_BINADES = 2
#: a fixed scale that still flushes more than this share of gradients is not good enough.
UNDERFLOW_TOLERANCE = 0.01
SCALE_EXPONENTS = tuple(range(25))  # loss scales 2^0 .. 2^24
LOSS_SCALES = tuple(2.0**k for k in SCALE_EXPONENTS)


def _bin_exponents() -> torch.Tensor:
    e = torch.arange(EXPONENT_BINS, dtype=torch.int64) - 127
    e[0] = -127  # FP32 subnormals: below 2^-126, flushed at every scale we consider
    return e


def _scale_exponent(scale: float) -> int:
    mantissa, exp = math.frexp(scale)
    if mantissa != 0.5:
        raise ValueError(f"loss scales must be powers of two, got {scale}")
    return exp - 1


def loss_scale_table(
    stats: GradientStats, scales: Iterable[float] = LOSS_SCALES
) -> list[LossScaleRow]:
    """What each power-of-two loss scale does to the observed gradients in FP16.

    Exact from the exponent histograms: a gradient g scaled by 2^k lands at floor(log2|g|) + k.
    """
    hist = stats.total_hist()
    total = int(hist.sum())
    exps = _bin_exponents()
    rows = []
    for scale in scales:
        k = _scale_exponent(scale)
        e = exps + k
        flushed = int(hist[e < FP16_MIN_EXP].sum())
        subnormal = int(hist[(e >= FP16_MIN_EXP) & (e < FP16_NORMAL_EXP)].sum())
        rows.append(
            LossScaleRow(
                scale=float(scale),
                flushed=flushed / total if total else 0.0,
                subnormal=subnormal / total if total else 0.0,
                overflow=stats.max_abs_grad * scale > FP16_MAX,
            )
        )
    return rows


def recommend_loss_scale(
    stats: GradientStats, margin: float = LOSS_SCALE_MARGIN
) -> LossScaleAdvice:
    """The largest power of two 2^0..2^24 with max|g| x scale x margin <= 65504.

    `auto` (PopTorch's automatic loss scaling) when one fixed scale is a gamble: the gradients
    drift more than DRIFT_BINADES across the steps, no scale keeps the margin, a scale that
    keeps it still flushes more than 1% of the gradients, or FP32 gradients were non-finite.
    """
    if int(stats.total_hist().sum()) == 0:
        return LossScaleAdvice(
            1.0, False, 0.0, 0.0, True, "no non-zero gradients were observed", margin
        )
    top = stats.max_abs_grad
    safe = [k for k in SCALE_EXPONENTS if top * 2.0**k * margin <= FP16_MAX]
    k = max(safe) if safe else 0
    at_1, at_scale = (row.flushed for row in loss_scale_table(stats, [1.0, 2.0**k]))
    overflow_free = top * 2.0**k <= FP16_MAX
    drift = stats.drift_binades()
    kept = (
        f"keeps {format_percent(1 - at_scale)} of non-zero gradients representable in FP16 "
        f"(scale 1 loses {format_percent(at_1)})"
    )
    why_auto = []
    if stats.nonfinite_count:
        why_auto.append(
            f"{stats.nonfinite_count} FP32 gradients were inf/NaN (is the learning rate too high?)"
        )
    if not safe:
        why_auto.append(
            f"max |gradient| {top:.3g} leaves less than a {margin:g}x margin even at scale 1"
        )
    if drift > DRIFT_BINADES:
        why_auto.append(f"gradients moved {drift} binades in {stats.steps} steps")
    if safe and at_scale > UNDERFLOW_TOLERANCE:
        why_auto.append(
            f"a fixed scale with a {margin:g}x margin still loses {format_percent(at_scale)}"
        )
    if why_auto:
        reason = "; ".join(why_auto) + f"; start at {format_scale(2**k)}, which {kept}"
    else:
        reason = f"{kept}; no overflow with {margin:g}x margin (max |gradient| {top:.3g})"
    return LossScaleAdvice(
        float(2**k), bool(why_auto), at_1, at_scale, overflow_free, reason, margin
    )
