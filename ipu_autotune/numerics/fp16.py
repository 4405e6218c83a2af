"""FP16 facts, the exponent histograms' bins, and how FP16 quantities are written."""

from __future__ import annotations

import math

FP16_MAX = 65504.0
FP16_MIN_EXP = (
    -24
)  # smallest subnormal 2^-24; below it a value flushes to zero (or to 2^-24, >=50% off)
FP16_NORMAL_EXP = -14  # smallest normal 2^-14; below it fewer significant bits remain
FP16_MANTISSA_BITS = 10

#: FP32 biased exponents: bin i holds floor(log2|x|) = i - 127; bin 0 = FP32 subnormals
EXPONENT_BINS = 256
#: update/half-ulp ratios are histogrammed in 1/64 binades ...
UPDATE_BINS_PER_BINADE = 64
#: ... from this many binades below half an ulp to this many above
UPDATE_RANGE = 48


def format_scale(scale: float) -> str:
    """1024 as 1024; 2^20 as 2^20 rather than 1.04858e+06."""
    mantissa, exp = math.frexp(scale)
    if scale < 1e5 or mantissa != 0.5:
        return f"{scale:g}"
    return f"2^{exp - 1}"


def format_percent(x: float) -> str:
    """Percent with as many decimals as it takes not to round to 0% or 100%."""
    p = 100 * x
    if p in (0, 100):
        return f"{p:.0f}%"
    for digits in (1, 2, 3):
        text = f"{p:.{digits}f}"
        if 0 < float(text) < 100:
            return text + "%"
    return "<0.001%" if p < 50 else ">99.999%"
