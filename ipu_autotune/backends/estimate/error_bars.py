"""Error bars on every estimate, from the calibration set's leave-one-out residuals.

The widths below are computed by `python tools/error_bars.py` from
`tests/calibration/points.toml` (docs/estimator.md, "Error bars"); `tests/test_error_bars.py`
recomputes them and fails when they drift. They ship here because a user's installed
package has no tests folder to read at run time.

- **Throughput**: published throughputs are numbers, so each point has a residual
  log(published / estimated). The 90 % interval is estimate x exp(+-w), w the split-conformal
  quantile of |residual| (the ceil(0.9 (n + 1))-th smallest), per category when it has the
  points for it, else over all throughput points.
- **Memory, by category**: weights, gradient accumulators and optimizer state are parameter
  counts times their bytes, exact; spread evenly over the compute tiles they are a part of the
  busiest tile no compiler decision removes (its *exact share*). Only the rest (activation
  liveness, temporaries, code and exchange, and how unevenly the compiler spreads it all) is
  uncertain. Published memory points are verdicts (fits or out of memory), which bound that
  error but do not measure it: the band is the range of a common factor on the uncertain part
  that every verdict of the model family still allows, up to the smallest factor at which a
  fitting point would overflow and down to the largest at which an out-of-memory one would
  fit (`crossing`). A point whose exact share alone is over a tile bounds nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...search.knobs import (
    family as family,  # the calibration family a problem's error bars come from
)

#: the throughput interval's nominal coverage
COVERAGE = 0.9

#: computed by tools/error_bars.py; checked by tests/test_error_bars.py
THROUGHPUT_LOG_WIDTH = {"all": 0.2809}
MEMORY_SCALE = {"all": (0.7640, 1.2358), "cnn": (0.7640, 1.2990)}


def conformal_width(residuals: Sequence[float], coverage: float = COVERAGE) -> float | None:
    """The ceil(coverage (n + 1))-th smallest |residual|, or None when n is too small for it."""
    ranked = sorted(abs(r) for r in residuals)
    k = math.ceil(coverage * (len(ranked) + 1))
    return ranked[k - 1] if 0 < k <= len(ranked) else None


def _per_category(
    groups: dict[str, Sequence[Any]], width_of: Callable[[Sequence[Any]], Any], missing: str
) -> dict[str, Any]:
    """`width_of` over every group pooled ("all") and over each group that has enough for it."""
    widths = {"all": width_of([v for vs in groups.values() for v in vs])}
    if widths["all"] is None:
        raise ValueError(missing)
    for category, vs in groups.items():
        w = width_of(vs)
        if w is not None:
            widths[category] = w
    return widths


def throughput_widths(residuals: dict[str, Sequence[float]]) -> dict[str, float]:
    """Log half-widths per category where it has enough points, and "all" pooled."""
    return _per_category(
        residuals, conformal_width, f"too few throughput residuals for a {COVERAGE:.0%} interval"
    )


def crossing(tile_fraction: float, exact_fraction: float = 0.0) -> float:
    """The common factor on the uncertain part of a busiest tile (`tile_fraction` of a tile, of
    which `exact_fraction` is exact) at which it fills the tile: 0 when the exact part alone
    does, infinite when nothing is uncertain and it fits."""
    if exact_fraction >= 1.0:
        return 0.0
    rest = tile_fraction - exact_fraction
    return math.inf if rest <= 0 else (1.0 - exact_fraction) / rest


def memory_scale(verdicts: Iterable[tuple[float, bool]]) -> tuple[float, float] | None:
    """(low, high) common factors on the uncertain part that every (crossing, fits) allows: a
    fit says the factor is at most its crossing, an out-of-memory point that it is above its
    own. None without a fitting point and an out-of-memory one that bounds anything."""
    verdicts = list(verdicts)
    fits = [c for c, ok in verdicts if ok]
    ooms = [c for c, ok in verdicts if not ok and c > 0]
    if not fits or not ooms:
        return None
    return min(1.0, max(ooms)), max(1.0, min(fits))


def memory_scales(
    verdicts: dict[str, Sequence[tuple[float, bool]]],
) -> dict[str, tuple[float, float]]:
    return _per_category(
        verdicts, memory_scale, "the memory band needs a point that fits and one that does not"
    )


def _band(model: str) -> tuple[float, float]:
    return MEMORY_SCALE.get(family(model), MEMORY_SCALE["all"])


def fit_chance(model: str, tile_fraction: float, exact_fraction: float = 0.0) -> float:
    """The chance that a busiest tile estimated at `tile_fraction` of a tile's memory, of which
    `exact_fraction` is exact, fits.

    The memory band says which common factors on the uncertain part the calibration verdicts
    allow, not how likely each is; with nothing to prefer one over another, the factor is
    taken as uniform in log over the band (a factor of 1.1 as likely as 1/1.1). The config
    fits when the factor is at most its `crossing`; 0 exactly when the exact part alone is over."""
    low, high = _band(model)
    limit = crossing(tile_fraction, exact_fraction)
    if limit == 0.0:
        return 0.0
    if math.isinf(limit):
        return 1.0
    if high <= low:
        return float(low <= limit)
    share = (math.log(limit) - math.log(low)) / (math.log(high) - math.log(low))
    return min(1.0, max(0.0, share))


def confident_fraction(model: str, confidence: float, exact_fraction: float = 0.0) -> float:
    """The busiest-tile fraction whose `fit_chance` is exactly `confidence`, given its exact
    share: the most of a tile an estimate may use and still count as fitting. With no exact
    share it is the least, the bound for a configuration not yet estimated."""
    low, high = _band(model)
    return float(exact_fraction + (1.0 - exact_fraction) / (low * (high / low) ** confidence))


def kept_free(model: str, headroom: float, confidence: float | None) -> float:
    """The fraction of a tile an estimate must leave free to count as fitting whatever its exact
    share: `headroom`, or more where the error bar asks for more to reach `confidence` (None:
    the headroom alone). The warm starts' climbs keep this much free."""
    if confidence is None:
        return headroom
    return max(headroom, 1.0 - confident_fraction(model, confidence))


@dataclass(frozen=True)
class Bars:
    """A Measurement's error bars: busiest tile and required bytes per IPU, throughput."""

    max_tile_bytes: list[list[int]]
    required_bytes: list[list[int]]
    throughput: list[float] | None
    device_throughput: list[float] | None
    straddles_tile_limit: bool


def bars(
    model: str,
    max_tile: Sequence[int],
    required: Sequence[int],
    exact: Sequence[float],
    compute_tiles: int,
    tile_capacity: int,
    throughput: float | None,
    device_throughput: float | None,
) -> Bars:
    """The band on the uncertain part of each IPU's figures; its `exact` bytes (weights,
    gradient accumulators, optimizer state) are added as they are, spread over its tiles."""
    low, high = _band(model)
    w = THROUGHPUT_LOG_WIDTH.get("end_to_end", THROUGHPUT_LOG_WIDTH["all"])
    wd = THROUGHPUT_LOG_WIDTH.get("device", THROUGHPUT_LOG_WIDTH["all"])

    def band(x: float, lo: float, hi: float) -> list[Any]:
        return [x * lo, x * hi]

    def banded(x: float, sure: float) -> list[int]:
        sure = min(sure, x)
        return [round(sure + (x - sure) * low), round(sure + (x - sure) * high)]

    tiles = [banded(t, e / compute_tiles) for t, e in zip(max_tile, exact, strict=True)]
    straddles = any(lo <= tile_capacity < hi for lo, hi in tiles)
    return Bars(
        max_tile_bytes=tiles,
        required_bytes=[banded(r, e) for r, e in zip(required, exact, strict=True)],
        throughput=band(throughput, math.exp(-w), math.exp(w)) if throughput else None,
        device_throughput=band(device_throughput, math.exp(-wd), math.exp(wd))
        if device_throughput
        else None,
        straddles_tile_limit=straddles,
    )
