"""Pipeline split points that balance the stages' memory or compute, over the per-unit
costs the estimator gives (torchgpipe's balance, as plain functions over per-layer costs):
the warm starts' and the guide's split moves start from them."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..backends.estimate import estimate
from ..backends.estimate.constants import NOMINAL, EstimatorConstants
from ..models import partition
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..profiles.refine import split_grid


def unit_costs(problem: Problem, profile: ModelProfile, config: Config, kind: str) -> list[float]:
    """Per-unit cost for balancing: bytes it needs ('memory') or FLOPs ('compute')."""
    if kind == "compute":
        return [u.forward_flops + 1.0 for u in profile.units]
    weight = 2.0 if config.half_weights else 4.0
    state = 16.0 if problem.optimizer in ("adam", "adamw", "lamb") else 8.0
    act = 0.5 if config.half_compute else 1.0
    return [u.params * (weight + state) + u.saved_bytes * act for u in profile.units]


def split_units(problem: Problem, profile: ModelProfile) -> ModelProfile:
    """The units splits are placed over, as the space draws them: large ones cut into their parts
    (profiles/refine.split_grid); under --trainer optimum, the layers IPUConfig counts."""
    return profile if problem.trainer == "optimum" else split_grid(profile)


#: balanced splits already found in this process (a pure function of its arguments; the problem's
#: IPU count is not one of them), with the profile and constants kept alive so their ids stay
#: theirs
_BALANCED: dict[tuple[Any, ...], tuple[ModelProfile, EstimatorConstants, tuple[str, ...]]] = {}


def balanced_splits(
    problem: Problem,
    profile: ModelProfile,
    config: Config,
    kind: str,
    constants: EstimatorConstants = NOMINAL,
) -> tuple[str, ...]:
    """`_balanced_splits`, remembered: each climb of a study's warm starts, and `plan`'s every
    size, asks for the same ones again."""
    key = (dataclasses.replace(problem, ipus=1), id(profile), config, kind, id(constants))
    found = _BALANCED.get(key)
    if found is None:
        if len(_BALANCED) >= 20_000:
            _BALANCED.clear()
        found = _BALANCED[key] = (
            profile,
            constants,
            _balanced_splits(problem, profile, config, kind, constants),
        )
    return found[2]


def _balanced_splits(
    problem: Problem,
    profile: ModelProfile,
    config: Config,
    kind: str,
    constants: EstimatorConstants = NOMINAL,
) -> tuple[str, ...]:
    """Splits balancing compute (FLOPs), or memory (the busiest IPU's busiest tile).

    Memory is balanced on the estimator itself, not on a per-unit cost: recomputation and
    stash depth make a unit's memory depend on which stage it lands in. A per-unit balance
    starts a descent that moves one boundary at a time while the worst tile improves.
    """
    base, profile = profile, split_units(problem, profile)
    cuts = partition.balanced(unit_costs(problem, profile, config, kind), config.ipus_per_replica)
    if kind == "memory":

        def worst(c: list[int]) -> float:
            trial = config.replace(splits=tuple(profile.units[i].path for i in c))
            return max(estimate(problem, trial, base, constants).max_tile_bytes)

        best = worst(cuts)
        improved = True
        while (
            improved
        ):  # first improvement: move one boundary a unit, keep it if the worst IPU is lighter
            improved = False
            for moved in partition.moved_cuts(cuts, len(profile.units), (-1, 1)):
                score = worst(moved)
                if score < best:
                    best, cuts, improved = score, moved, True
                    break
    return tuple(profile.units[c].path for c in cuts)
