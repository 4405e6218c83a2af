"""What a measurement of one configuration says: the vocabulary every layer shares, beside
Config and Problem (problem.py). Backends produce it (backends/base.py); the guide, the
study, the host model, the rules and the exports read it, without importing a backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SOURCES = ("estimate", "compile", "run")
FAILURE_KINDS = ("oom", "invalid", "compile_error", "timeout", "crash", "interrupted")
CATEGORIES = (
    "weights",
    "optimizer",
    "gradients",
    "activations",
    "stash",
    "temporary",
    "code/exchange",
)


@dataclass
class Measurement:
    """What a backend says of one configuration. Lists are per IPU of a replica."""

    feasible: bool
    source: str
    required_bytes: list[int] = field(default_factory=list)
    capacity_bytes: list[int] = field(default_factory=list)
    max_tile_bytes: list[int] = field(default_factory=list)
    tile_capacity_bytes: int = 0
    breakdown: list[dict[str, int]] = field(default_factory=list)
    overflow_bytes: int = 0
    throughput: float | None = None  # samples/s of the whole config, all replicas
    step_time_s: float | None = None  # one weight update
    failure: str | None = None
    reason: str = ""
    #: fraction of tile memory kept free for estimation error (estimate backend only)
    headroom: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    # End to end (host/pipeline.py): `throughput` includes the host input pipeline; these
    # say what the IPUs alone would do and what limits the call.
    device_throughput: float | None = None  # samples/s of the IPUs fed without waiting
    samples_per_call: int | None = None
    host_bytes_per_call: int | None = None
    bottleneck: str | None = (
        None  # device compute | host input | host call | all-reduce | weight update
    )
    bottleneck_share: float | None = None  # its fraction of one call
    # Error bars (estimate backend only; backends/estimate/error_bars.py): [low, high] per IPU
    # for memory, [low, high] samples/s for throughput; None where there is no interval.
    max_tile_bytes_interval: list[list[int]] | None = None
    required_bytes_interval: list[list[int]] | None = None
    throughput_interval: list[float] | None = None
    device_throughput_interval: list[float] | None = None
    straddles_tile_limit: bool = (
        False  # some IPU's busiest-tile interval holds the tile's capacity
    )
    #: the chance the busiest tile fits, by the error bar (error_bars.fit_chance), and the chance
    #: an estimate needs to count as fitting (--fit-confidence); None where not asked
    fit_chance: float | None = None
    fit_confidence: float | None = None

    @property
    def tile_limit_bytes(self) -> float:
        return self.tile_capacity_bytes * (1.0 - self.headroom)

    @property
    def violation(self) -> float:
        """Graded constraint for the sampler: how far over capacity, as a fraction (<= 0 fits).

        Taken on the busiest tile of the worst IPU, because OOM is per tile. Failures that
        are not about memory score 1.0: infeasible, with nothing to learn about distance.
        """
        if self.failure not in (None, "oom"):
            return 1.0
        if not self.max_tile_bytes or not self.tile_capacity_bytes:
            return 0.0 if self.feasible else 1.0
        worst = max(self.max_tile_bytes) / self.tile_limit_bytes - 1.0
        if self.feasible:
            return min(worst, 0.0)
        return max(worst, 1e-6)

    def worst_ipu(self) -> int | None:
        if not self.max_tile_bytes:
            return None
        return max(range(len(self.max_tile_bytes)), key=lambda i: self.max_tile_bytes[i])

    def worst_overflow(self) -> tuple[int, int] | None:
        """(the IPU with the busiest tile, its bytes beyond capacity), or None without tiles."""
        ipu = self.worst_ipu()
        return None if ipu is None else (ipu, per_ipu_overflow(self)[ipu])

    def verdict(self, short: bool = False) -> str:
        """One line for tables: 'fits', 'OOM by 312 MB on IPU1', 'timeout: ...'. `short`: at
        most ~18 characters for the trial table: 'OOM +312 MB IPU1', 'timeout'."""
        if self.failure and self.failure != "oom":
            return f"{self.failure}: {self.reason}" if self.reason and not short else self.failure
        if self.feasible:
            return "fits"
        worst = self.worst_overflow()
        if worst is None:
            return "OOM"
        ipu, over = worst
        if over == 0:  # inside a tile: within the headroom, or under the fit confidence asked
            unsure = (
                self.fit_confidence is not None
                and self.fit_chance is not None
                and self.fit_chance < self.fit_confidence
            )
            if short:
                return f"fit chance {self.fit_chance:.0%}" if unsure else "in headroom"
            used = self.max_tile_bytes[ipu] / self.tile_capacity_bytes
            if unsure:
                return (
                    f"{used:.0%} of tile memory on IPU{ipu}: a {self.fit_chance:.0%} chance to "
                    f"fit by the error bar, under the {self.fit_confidence:.0%} asked"
                )
            return (
                f"{used:.0%} of tile memory on IPU{ipu}, inside the {self.headroom:.0%} headroom"
            )
        return (
            f"OOM +{format_bytes(over)} IPU{ipu}"
            if short
            else f"OOM by {format_bytes(over)} on IPU{ipu}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible,
            "source": self.source,
            "required_bytes": list(self.required_bytes),
            "capacity_bytes": list(self.capacity_bytes),
            "max_tile_bytes": list(self.max_tile_bytes),
            "tile_capacity_bytes": self.tile_capacity_bytes,
            "breakdown": [dict(b) for b in self.breakdown],
            "overflow_bytes": self.overflow_bytes,
            "throughput": self.throughput,
            "step_time_s": self.step_time_s,
            "failure": self.failure,
            "reason": self.reason,
            "headroom": self.headroom,
            "device_throughput": self.device_throughput,
            "samples_per_call": self.samples_per_call,
            "host_bytes_per_call": self.host_bytes_per_call,
            "bottleneck": self.bottleneck,
            "bottleneck_share": self.bottleneck_share,
            "max_tile_bytes_interval": self.max_tile_bytes_interval,
            "required_bytes_interval": self.required_bytes_interval,
            "throughput_interval": self.throughput_interval,
            "device_throughput_interval": self.device_throughput_interval,
            "straddles_tile_limit": self.straddles_tile_limit,
            "fit_chance": self.fit_chance,
            "fit_confidence": self.fit_confidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        keys = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in keys})


def per_ipu_overflow(m: Measurement) -> list[int]:
    """Bytes each IPU would need beyond its capacity if every tile were as full as its busiest."""
    out = []
    for i, tile in enumerate(m.max_tile_bytes):
        tiles = m.capacity_bytes[i] // m.tile_capacity_bytes if m.tile_capacity_bytes else 0
        out.append(max(0, (tile - m.tile_capacity_bytes) * tiles))
    return out


def failed(kind: str, reason: str, source: str = "compile", **details: Any) -> Measurement:
    assert kind in FAILURE_KINDS, kind
    return Measurement(feasible=False, source=source, failure=kind, reason=reason, details=details)


def format_bytes(n: float | None) -> str:
    if n is None or math.isnan(n):
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return (
                f"{n / size:.{0 if unit == 'MB' else 1}f} {unit}"
                if unit != "MB"
                else f"{n / size:.0f} MB"
            )
    return f"{n:.0f} B"
