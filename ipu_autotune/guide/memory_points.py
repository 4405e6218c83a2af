"""A compile's tiles as points of the memory model (guide/memory_model.py): per IPU, the
estimate's busiest tile and its memory categories' shares, against what the compile measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..measurement import CATEGORIES, Measurement
from ..problem import Config


@dataclass(frozen=True)
class MemoryPoint:
    layout: tuple[Any, ...]
    estimated: float  # estimated busiest tile, fraction of a tile
    shares: tuple[float, ...]  # per CATEGORIES, the estimator's share of the IPU's memory
    measured: float  # measured busiest tile, fraction of a tile
    checkpoints: float = 0.0  # recomputation segments per IPU (recompute_segments)


def recompute_segments(config: Config) -> float:
    """Recomputation segments per IPU of a replica (checkpoints + 1 when recomputing, else 0):
    each segment is recomputed by its own code, which a fixed cost may grow with."""
    if config.effective_recompute == "none":
        return 0.0
    return (len(config.checkpoints) + 1) / config.ipus_per_replica


def ipu_shares(breakdown: dict[str, int] | None) -> tuple[float, ...]:
    total = sum((breakdown or {}).values())
    return tuple((breakdown or {}).get(c, 0) / total if total else 0.0 for c in CATEGORIES)


def memory_points(
    screen: Callable[[Config], Measurement | None],
    measured: Sequence[Any],
    layout: Callable[[Config], tuple[Any, ...]],
) -> list[MemoryPoint]:
    """One point per IPU of every compile that reports its tiles; `screen` gives the nominal
    estimate of a config (warmstart.Screen), `measured` is (config, Measurement) pairs,
    `layout` the IPU layout a fixed cost may depend on (guide/apart.layout)."""
    out = []
    for config, m in measured:
        if m.source == "estimate" or m.failure not in (None, "oom") or not m.max_tile_bytes:
            continue
        predicted = screen(config)
        if predicted is None or len(predicted.max_tile_bytes) != len(m.max_tile_bytes):
            continue
        cap = predicted.tile_capacity_bytes or m.tile_capacity_bytes
        parts: Sequence[dict[str, int] | None] = predicted.breakdown or [None] * len(
            m.max_tile_bytes
        )
        # a breakdown of another length is read as far as it goes (calibration/prior.memory_points)
        for got, want, breakdown in zip(
            m.max_tile_bytes, predicted.max_tile_bytes, parts, strict=False
        ):
            out.append(
                MemoryPoint(
                    layout(config),
                    want / cap,
                    ipu_shares(breakdown),
                    got / cap,
                    recompute_segments(config),
                )
            )
    return out
