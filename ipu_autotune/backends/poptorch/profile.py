"""Memory per IPU from a compile's `profile.pop`, read with PopVision's `pva` (reference §5).

Per IPU of a replica: the sum of `tile.memory.total.includingGaps` (what the IPU needs), the
busiest tile (what decides OOM: memory is per tile), and the sum of
`tile.memory.overflowed.includingGaps` (bytes past the tiles' capacity). Capacity comes from
the target: `bytesPerTile` x `tilesPerIpu`.

The breakdown is as fine as a profile allows per IPU, which is coarser than the estimator's:
pva attributes bytes to tiles, not to weights or optimizer state. So it reports

- ``code/exchange``: the code categories of each tile (vertex and control code, exchange code);
- ``always-live``: the rest of the always-live bytes (weights, optimizer state, gradient
  accumulators, pipeline stash, constants: variables that live for the whole program);
- ``not-always-live``: activations and temporaries (each tile's peak);
- ``gaps``: alignment and allocation gaps (including minus excluding gaps).

They add up to the IPU's total. Named always-live variables would split weights from
optimizer state, but not per IPU, and walking them is slow (reference §5.2), so we don't.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROFILE_NAME = "profile.pop"
#: pva memory categories that are code or exchange code (reference §5.2).
CODE_CATEGORIES = (
    "vertexCode",
    "controlCode",
    "internalExchangeCode",
    "globalExchangeCode",
    "hostExchangeCode",
)


@dataclass
class ProfileMemory:
    path: str
    ipus_per_replica: int
    replicas: int
    tiles_per_ipu: int
    tile_capacity_bytes: int
    capacity_bytes: list[int] = field(default_factory=list)
    required_bytes: list[int] = field(default_factory=list)
    max_tile_bytes: list[int] = field(default_factory=list)
    overflow_bytes: list[int] = field(default_factory=list)  # per IPU, from the profile
    overflowing_tiles: list[int] = field(default_factory=list)
    breakdown: list[dict[str, int]] = field(default_factory=list)

    @property
    def total_overflow(self) -> int:
        return sum(self.overflow_bytes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProfileMemory:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def find_profile(report_dir: str | Path, model_name: str = "training") -> Path | None:
    """`<autoReport.directory>/<modelName or "training">/profile.pop`, else any profile below."""
    report_dir = Path(report_dir)
    expected = report_dir / model_name / PROFILE_NAME
    if expected.is_file():
        return expected
    found = sorted(report_dir.rglob(PROFILE_NAME)) if report_dir.is_dir() else []
    return found[0] if found else None


def _get(obj: Any, path: str, default: Any = 0) -> Any:
    """A dotted attribute path, or `default` where this pva version lacks it."""
    for name in path.split("."):
        try:
            obj = getattr(obj, name)
        except (AttributeError, RuntimeError):
            return default
    return obj


def read_profile(path: str | Path, ipus_per_replica: int | None = None) -> ProfileMemory:
    """Per-IPU memory of one replica. Raises if pva cannot open the file."""
    import pva  # ships with the Poplar SDK only

    report = pva.openReport(str(path))
    target = report.compilation.target
    ipus = report.compilation.ipus
    n_ipus = len(ipus)
    replicas = int(_get(target, "numReplicas", 1) or 1)
    per_replica = int(
        ipus_per_replica or _get(target, "ipusPerReplica", 0) or max(1, n_ipus // replicas)
    )
    # Whether ipus lists one replica or all of them is unverified (reference §10); replicas
    # are identical, so the first `per_replica` IPUs are one replica either way.
    per_replica = min(per_replica, n_ipus) if n_ipus else per_replica
    bytes_per_tile = int(target.bytesPerTile)
    tiles_per_ipu = int(target.tilesPerIpu)

    out = ProfileMemory(
        path=str(path),
        ipus_per_replica=per_replica,
        replicas=replicas,
        tiles_per_ipu=tiles_per_ipu,
        tile_capacity_bytes=bytes_per_tile,
    )
    for i in range(per_replica):
        total = busiest = overflow = overflowing = 0
        code = always = not_always = excluding = 0
        for tile in ipus[i].tiles:
            memory = tile.memory
            t = int(memory.total.includingGaps)
            total += t
            busiest = max(busiest, t)
            over = int(_get(memory, "overflowed.includingGaps", 0))
            if over == 0 and t > bytes_per_tile:
                over = t - bytes_per_tile  # the equivalent check of reference §5.2
            overflow += over
            overflowing += over > 0
            excluding += int(_get(memory, "total.excludingGaps", t))
            always += int(_get(memory, "alwaysLiveBytes", 0))
            not_always += int(_get(memory, "notAlwaysLiveBytes", 0))
            code += sum(int(_get(memory, f"category.{c}.total", 0)) for c in CODE_CATEGORIES)
        out.capacity_bytes.append(bytes_per_tile * tiles_per_ipu)
        out.required_bytes.append(total)
        out.max_tile_bytes.append(busiest)
        out.overflow_bytes.append(overflow)
        out.overflowing_tiles.append(overflowing)
        if always or not_always:
            code = min(code, always)
            out.breakdown.append(
                {
                    "code/exchange": code,
                    "always-live": always - code,
                    "not-always-live": not_always,
                    "gaps": max(0, total - always - not_always),
                }
            )
        else:  # no liveness split in this profile: say only what is known
            out.breakdown.append({"always-live": total})
    return out
