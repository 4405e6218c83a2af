"""A configuration as the knob-effect model sees it: one coordinate per knob.

Every Config field becomes a coordinate, by its kind in the knob spec, not by its name: a
word or a switch is a level (two configs share it or not); a whole number is its log2, so
that accumulation 4 -> 8 is the same step as 16 -> 32; a number is itself (loss scaling: its
log2, "auto" a level); a per-IPU proportion is one coordinate per IPU position; split points
are their positions in the model's execution order; checkpoints, their count. No coordinate
is tuned to a knob: a knob added to the spec is learnt as its kind is. Beside the knobs, each
group of structural choices (GROUPS) is a level: the values of its knobs together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ..knob_spec import SPEC
from ..problem import Config
from ..profiles.model_profile import ModelProfile

_KIND = {k.name: k.kind for k in SPEC}
#: levels for groups of configurations that share structural choices: the estimator's error
#: differs most between them (how the model is laid out; that with its numerics, optimizer
#: and recomputation), so each is a term of the knob-effect model of its own, with its spread
GROUPS = {
    "layout": ("ipus_per_replica", "replicas", "execution"),
    "structure": (
        "ipus_per_replica",
        "replicas",
        "execution",
        "precision",
        "partials",
        "optimizer_state",
        "optimizer_offload",
        "replicated_tensor_sharding",
        "recompute",
    ),
}
_TILE_MEMORY = {k.name for k in SPEC if k.tile_memory} | set(GROUPS)
#: per-IPU and per-split coordinates: each IPU (split) of a layout holds an equal share of them,
#: so one IPU's change moves the knob as far on 2 IPUs as on 8 (a knob's distance is their RMS)
POSITIONS = 8
#: scale of a whole number's log2 coordinate: 1 is a factor of 2**8 (accumulation 1 -> 256)
LOG2_SPAN = 8.0


@dataclass(frozen=True)
class Coordinates:
    """What the model reads of every configuration: the names of the numeric coordinates
    (each in about [0, 1]) and of the levels, and which of them change the tiles."""

    numeric: tuple[str, ...]
    levels: tuple[str, ...]

    def memory_mask(self) -> tuple[list[bool], list[bool]]:
        """Which numeric coordinates and levels change what the tiles hold (knob_spec's
        tile_memory)."""

        def knob(name: str) -> str:  # 'available_memory_proportion[2]'
            return name.split("[")[0]

        return [knob(n) in _TILE_MEMORY for n in self.numeric], [
            knob(n) in _TILE_MEMORY for n in self.levels
        ]


def _positions(values: tuple[Any, ...], default: float) -> list[float]:
    out = list(values) or [default]
    return [out[i * len(out) // POSITIONS] for i in range(POSITIONS)]


def describe(
    config: Config,
    unit_index: dict[str, int],
    units: int,
    split_at: tuple[float, ...] | None = None,
) -> tuple[dict[str, float], dict[str, object]]:
    """(numeric coordinates, levels) of one configuration. `unit_index`: a module path's
    place in execution order, of `units`; `split_at`: the splits' places as fractions of the
    model instead (another model's config, whose paths this one has not: a stored record)."""
    numeric: dict[str, float] = {}
    levels: dict[str, object] = {}
    for f in fields(Config):
        name, value, kind = f.name, getattr(config, f.name), _KIND.get(f.name)
        if name == "available_memory_proportion":
            for i, v in enumerate(_positions(value, 0.6)):
                numeric[f"{name}[{i}]"] = v
        elif kind == "paths" and name == "splits":
            where = (
                list(split_at)
                if split_at is not None
                else [unit_index.get(p, 0) / max(units, 1) for p in value]
            )
            for i, v in enumerate(_positions(tuple(where), 1.0)):
                numeric[f"{name}[{i}]"] = v
        elif kind == "paths":
            numeric[name] = math.log2(1 + len(value)) / LOG2_SPAN
        elif kind == "int":
            numeric[name] = math.log2(1 + (value or 0)) / LOG2_SPAN
        elif kind == "number":  # loss scaling: its log2, and "auto" a level of its own
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            numeric[name] = math.log2(max(value, 1e-9)) / (2 * LOG2_SPAN) if number else 0.0
            levels[name] = "number" if number else value
        else:  # words, switches, and a number's word ("auto")
            levels[name] = value
    for group, names in GROUPS.items():
        levels[group] = tuple(getattr(config, n) for n in names)
    return numeric, levels


class Featurizer:
    """Configurations as arrays of coordinates, cached (a proposal judges thousands)."""

    def __init__(self, unit_paths: list[str]):
        self.unit_index = {p: i for i, p in enumerate(unit_paths)}
        self.units = len(unit_paths)
        numeric, levels = describe(Config(), self.unit_index, self.units)
        self.coordinates = Coordinates(tuple(numeric), tuple(levels))
        self._cache: dict[Config, tuple[list[float], list[object]]] = {}

    def __call__(self, config: Config) -> tuple[list[float], list[object]]:
        got = self._cache.get(config)
        if got is None:
            if len(self._cache) > 200_000:  # bounded: a long study must not grow it forever
                self._cache.clear()
            numeric, levels = describe(config, self.unit_index, self.units)
            got = self._cache[config] = (
                [numeric[n] for n in self.coordinates.numeric],
                [levels[n] for n in self.coordinates.levels],
            )
        return got

    def foreign(
        self, config: Config, split_at: tuple[float, ...]
    ) -> tuple[list[float], list[object]]:
        """Another model's configuration (a stored record's), its splits at `split_at`
        (fractions of that model, as split_fractions gives them): not cached."""
        numeric, levels = describe(config, {}, 0, split_at)
        return [numeric[n] for n in self.coordinates.numeric], [
            levels[n] for n in self.coordinates.levels
        ]


def split_fractions(ops_by_stage: list[int] | tuple[int, ...]) -> tuple[float, ...]:
    """Where each stage after the first starts, as a fraction of the model's ops: a stored
    record's splits without the model's execution order (calibration/record.profile_summary)."""
    total = sum(ops_by_stage) or 1
    out, before = [], 0
    for ops in ops_by_stage[:-1]:
        before += ops
        out.append(before / total)
    return tuple(out)


_FEATURIZERS: dict[tuple[str, ...], Featurizer] = {}


def featurizer_for(profile: ModelProfile) -> Featurizer:
    """The Featurizer of a model profile's execution order (one per model, cached)."""
    paths = tuple(u.path for u in profile.units)
    if paths not in _FEATURIZERS:
        _FEATURIZERS[paths] = Featurizer(list(paths))
    return _FEATURIZERS[paths]
