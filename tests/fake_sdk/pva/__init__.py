"""A test double of PopVision's `pva` Python API, reading the fake PopTorch's JSON `profile.pop`.

Only the attribute paths of the API reference (§5) exist: report.compilation.target.*,
report.compilation.ipus[i].tiles[j].memory.{total,overflowed}.{includingGaps,excludingGaps},
.alwaysLiveBytes, .notAlwaysLiveBytes, .category.<name>.total, report.compilation.tiles,
report.compilation.livenessProgramSteps[k].notAlwaysLiveMemory.{bytes,variables}; an
offline or OOM compile has no execution profile, so report.execution is empty.
The IPU list covers every replica (replicas repeat the first one's tiles).
"""

from __future__ import annotations

import enum
import json
from types import SimpleNamespace

__version__ = "3.4.0+fake"
__fake__ = True


class Target:
    class Type(enum.Enum):
        Ipu = 0
        IpuModel = 1
        Cpu = 2
        Unknown = 3


class _Gaps:
    __slots__ = ("includingGaps", "excludingGaps")

    def __init__(self, including: int, excluding: int):
        self.includingGaps = including
        self.excludingGaps = excluding


class _Category:
    __slots__ = ("total",)

    def __init__(self, total: int):
        self.total = total


class _Categories:
    def __init__(self, fractions: dict[str, float], excluding: int):
        for name, fraction in fractions.items():
            setattr(self, name, _Category(int(excluding * fraction)))


class _Memory:
    def __init__(
        self,
        total: int,
        excluding: int,
        always: int,
        bytes_per_tile: int,
        fractions: dict[str, float],
    ):
        self.total = _Gaps(total, excluding)
        self.overflowed = _Gaps(max(0, total - bytes_per_tile), max(0, excluding - bytes_per_tile))
        self.alwaysLiveBytes = always
        self.notAlwaysLiveBytes = excluding - always
        self._fractions = fractions
        self._excluding = excluding

    @property
    def category(self) -> _Categories:
        return _Categories(self._fractions, self._excluding)


class _Tile:
    def __init__(self, number: int, memory: _Memory):
        self.number = number
        self.memory = memory


class _Ipu:
    def __init__(self, index: int, data: dict, bytes_per_tile: int, tiles_per_ipu: int):
        self.id = index
        self._data = data
        self._bytes_per_tile = bytes_per_tile
        self._first_tile = index * tiles_per_ipu
        self._tiles = None

    @property
    def tiles(self) -> list[_Tile]:
        if self._tiles is None:
            d = self._data
            self._tiles = [
                _Tile(
                    self._first_tile + j, _Memory(t, e, a, self._bytes_per_tile, d["categories"])
                )
                for j, (t, e, a) in enumerate(
                    zip(d["total"], d["excluding"], d["alwaysLive"], strict=True)
                )
            ]
        return self._tiles


class _Compilation:
    def __init__(self, data: dict):
        t = data["target"]
        bytes_per_tile, tiles = t["bytesPerTile"], t["tilesPerIpu"]
        num_ipus = t["numIPUs"]
        self.target = SimpleNamespace(
            type=Target.Type[t["type"]],
            bytesPerTile=bytes_per_tile,
            tilesPerIpu=tiles,
            numIPUs=num_ipus,
            numTiles=tiles * num_ipus,
            bytesPerIPU=bytes_per_tile * tiles,
            totalMemory=bytes_per_tile * tiles * num_ipus,
            clockFrequency=t["clockFrequency"],
            numReplicas=t["numReplicas"],
            ipusPerReplica=t["ipusPerReplica"],
            tilesPerReplica=tiles * t["ipusPerReplica"],
            memoryPerReplica=bytes_per_tile * tiles * t["ipusPerReplica"],
        )
        per_replica = data["ipus"]
        self.ipus = [
            _Ipu(i, per_replica[i % len(per_replica)], bytes_per_tile, tiles)
            for i in range(num_ipus)
        ]
        self.livenessProgramSteps = [
            SimpleNamespace(notAlwaysLiveMemory=SimpleNamespace(bytes=b, variables=[]))
            for b in data.get("liveness", [])
        ]
        self.alwaysLiveVariables = []
        self.graph = SimpleNamespace(numComputeSets=0)
        self.computeSets = []

    @property
    def tiles(self) -> list[_Tile]:
        return [tile for ipu in self.ipus for tile in ipu.tiles]


class Report:
    def __init__(self, data: dict):
        self.compilation = _Compilation(data)
        self.execution = SimpleNamespace(runs=[], steps=[], totalCycles=SimpleNamespace(total=0))
        self.poplarVersion = SimpleNamespace(string=data.get("poplarVersion", "fake"))
        self.version = SimpleNamespace(major=3, minor=4, point=0, isUnstableFormat=False)


def openReport(filename: str, debug_filename: str | None = None) -> Report:
    """Open a fake profile.pop; a missing or foreign file raises, as libpva does."""
    with open(filename) as f:
        try:
            data = json.load(f)
        except ValueError as exc:
            raise RuntimeError(f"{filename}: not a profile this fake pva can read") from exc
    if data.get("format") != "fake-pva/1":
        raise RuntimeError(f"{filename}: unknown profile format {data.get('format')!r}")
    return Report(data)
