"""The first trials of a new study: the baseline, then estimator-guided candidates.

On hardware every trial is a compile, so the first few must count. The estimator is cheap
(well under a millisecond), so it screens hundreds of candidates here to propose a handful:
balanced pipeline splits, the cheapest single changes that make the baseline fit, and the
result of a greedy climb on estimated throughput from the best of those.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..backends.estimate import estimate, profile_at_micro_batch
from ..backends.estimate.constants import NOMINAL, EstimatorConstants
from ..batch import micro_batch
from ..knob_spec import SPEC
from ..measurement import Measurement
from ..models import partition
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..profiles.optimum_placement import layer_units, wildcard_cuts
from ..profiles.placement import stage_starts
from ..profiles.refine import split_grid
from ..rules.cross_field import min_pipeline_accumulation, violations
from ..search.replay import checkpoint_spacing, with_splits
from ..search.space import Choice, Range, SearchSpace, checkpoints_every
from .prior import GuidePrior
from .proposal import Proposal

#: a study's baseline trial; the runner may add a note to it ("baseline (outside your space: ...)"),
#: so the stored origin is tested by its start
BASELINE_ORIGIN = "baseline"


def is_baseline(origin: str) -> bool:
    return origin.startswith(BASELINE_ORIGIN)


def naive_baseline(problem: Problem, profile: ModelProfile) -> Config:
    """What a newcomer writes: FP32, defaults, split by block count over all IPUs."""
    n = (
        problem.ipus
        if problem.ipus & (problem.ipus - 1) == 0
        else 1 << (problem.ipus.bit_length() - 1)
    )
    n = min(n, len(profile.units))
    if problem.trainer == "optimum":
        # IPUTrainer's newcomer: IPUConfig(ipus_per_replica=n), layers_per_ipu left [-1],
        # so stages begin at layers only (profiles/optimum_placement.py)
        layers = len(layer_units(problem, profile))
        n = min(n, 1 << (layers.bit_length() - 1)) if layers else 1  # a power of two, a layer each
        cuts = wildcard_cuts(problem, profile, n)
    else:
        cuts = partition.by_count(len(profile.units), n)
    accumulation = min_pipeline_accumulation(problem, n)
    execution = "pipelined"
    if problem.global_batch:
        accumulation = max(1, problem.global_batch // problem.batch_size)
        if accumulation < min_pipeline_accumulation(problem, n):
            execution = "sharded"
    return Config(
        ipus_per_replica=n,
        splits=tuple(profile.units[c].path for c in cuts),
        gradient_accumulation=accumulation,
        execution=execution,
    )


def unit_costs(problem: Problem, profile: ModelProfile, config: Config, kind: str) -> list[float]:
    """Per-unit cost for balancing: bytes it needs ('memory') or FLOPs ('compute')."""
    if kind == "compute":
        return [u.forward_flops + 1.0 for u in profile.units]
    weight = 2.0 if config.half_weights else 4.0
    state = 16.0 if problem.optimizer in ("adam", "adamw", "lamb") else 8.0
    act = 0.5 if config.half_compute else 1.0
    return [u.params * (weight + state) + u.saved_bytes * act for u in profile.units]


def _split_grid(problem: Problem, profile: ModelProfile) -> ModelProfile:
    """The units splits are placed over, as the space draws them: large ones cut into their parts
    (profiles/refine.split_grid); under --trainer optimum, the layers IPUConfig counts."""
    return profile if problem.trainer == "optimum" else split_grid(profile)


#: balanced splits already found in this process (a pure function of its arguments; the problem's
#: IPU count is not one of them), with the profile and constants kept alive so their ids stay theirs
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
    base, profile = profile, _split_grid(problem, profile)
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


def single_changes(
    space: SearchSpace, problem: Problem, profile: ModelProfile, config: Config
) -> Iterator[tuple[str, Config]]:
    """Single-knob changes of `config` within the space (and a few that need a partner)."""

    def values(name: str) -> list[Any]:
        knob = space.knobs.get(name)
        if isinstance(knob, Choice):
            return list(knob.values)
        if isinstance(knob, Range):
            if knob.integer:
                v, out = max(1, int(knob.low)), []
                while v <= knob.high:
                    out.append(v)
                    v *= 2
                return out
            return [
                round(knob.low + i * (knob.step or 0.05), 4)
                for i in range(0, 40)
                if knob.low + i * (knob.step or 0.05) <= knob.high + 1e-9
            ][::3]
        return []

    c = config
    guide_moves = {
        "execution": _execution_moves,
        "recompute": _recompute_moves,
        "splits": _split_moves,
        "ipus_per_replica": _layout_moves,
    }
    for knob in SPEC:
        if knob.name in guide_moves:
            for moved in guide_moves[knob.name](space, problem, profile, c, values):
                yield knob.name, moved
        elif knob.moves is not None and knob.applies_to(problem, c):
            for moved in knob.moves(problem, c, values(knob.name)):
                yield knob.name, moved


# The layout knobs' moves need the profile and the space: the guide's own.


def _execution_moves(
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    c: Config,
    values: Callable[[str], list[Any]],
) -> Iterator[Config]:
    if c.ipus_per_replica > 1:
        least = min_pipeline_accumulation(problem, c.ipus_per_replica)
        for execution in values("execution"):
            if execution != c.execution and (
                execution != "pipelined"
                or not problem.global_batch
                or c.gradient_accumulation >= least
            ):
                accumulation = (
                    c.gradient_accumulation
                    if execution == "sharded" or problem.global_batch
                    else max(c.gradient_accumulation, least)
                )
                yield c.replace(
                    execution=execution,
                    recompute="default",
                    checkpoints=(),
                    io_tiles=0,
                    gradient_accumulation=accumulation,
                )


def _recompute_moves(
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    c: Config,
    values: Callable[[str], list[Any]],
) -> Iterator[Config]:
    # Recomputation and its checkpoints move together: one without the other rarely helps.
    for r in values("recompute"):
        if r == "pipeline" and not c.pipelined:
            continue
        moved = c.replace(recompute=r, checkpoints=())
        if moved.effective_recompute in ("pipeline", "all"):
            for every in values("checkpoint_every"):
                candidate = moved.replace(checkpoints=checkpoints_every(profile, c.splits, every))
                if candidate != c:
                    yield candidate
        elif moved != c:
            yield moved


def _split_moves(
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    c: Config,
    values: Callable[[str], list[Any]],
) -> Iterator[Config]:
    if c.ipus_per_replica > 1:
        every = checkpoint_spacing(profile, c) if c.checkpoints else None
        for kind in ("memory", "compute"):
            yield with_splits(profile, c, balanced_splits(problem, profile, c, kind), every)
        grid = _split_grid(problem, profile)
        starts = stage_starts(grid, c.splits)
        if starts is not None:
            for moved in partition.moved_cuts(starts, len(grid.units), (-4, -2, -1, 1, 2, 4)):
                yield with_splits(profile, c, tuple(grid.units[i].path for i in moved), every)


def _layout_moves(
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    c: Config,
    values: Callable[[str], list[Any]],
) -> Iterator[Config]:
    for ipr, replicas in space.ipu_layouts(problem, profile):
        if (ipr, replicas) == (c.ipus_per_replica, c.replicas):
            continue
        accumulation = c.gradient_accumulation
        if problem.global_batch:
            accumulation = problem.global_batch // (
                micro_batch(problem, c) * replicas
            )  # the rules judge a remainder
        elif ipr > 1:
            accumulation = max(accumulation, min_pipeline_accumulation(problem, ipr))
        moved = c.replace(
            ipus_per_replica=ipr,
            replicas=replicas,
            available_memory_proportion=(),
            gradient_accumulation=accumulation,
            replicated_tensor_sharding=False,
            checkpoints=(),
            recompute="default",
            splits=(),
            io_tiles=0,
            execution="pipelined"
            if ipr > 1 and accumulation >= min_pipeline_accumulation(problem, ipr)
            else ("sharded" if ipr > 1 else c.execution),
        )
        if ipr > 1:
            moved = moved.replace(splits=balanced_splits(problem, profile, moved, "memory"))
        yield moved


class Screen:
    """Estimates with a cache, keeping only configs that pass the rules.

    `prepare` is applied to every candidate before it is judged (the numerics advice: the
    study will run candidates with it, so they must be judged with it).
    """

    #: other studies' compiles as a guide.prior.GuidePrior (the calibration store), read by
    #: every CorrectedModel built on this screen; None: the estimate as it is
    prior: GuidePrior | None = None

    def __init__(
        self,
        problem: Problem,
        profile: ModelProfile,
        constants: EstimatorConstants = NOMINAL,
        headroom: float = 0.0,
        prepare: Callable[[Config], Config] | None = None,
        space: SearchSpace | None = None,
    ):
        self.problem, self.profile, self.constants = problem, profile, constants
        self.headroom = headroom
        self.prepare = prepare or (lambda c: c)
        self.space = space  # when given, configs outside it are rejected like invalid ones
        self.cache: dict[Config, Measurement | None] = {}

    def candidates(self, space: SearchSpace, config: Config) -> Iterable[tuple[str, Config]]:
        """Single-knob moves, each projected into the space: a climb only walks in-space
        configs (a fixed knob stays fixed), so no warm start is dropped by the run loop."""
        for knob, candidate in single_changes(space, self.problem, self.profile, config):
            yield knob, self.prepare(space.project(self.problem, self.profile, candidate))

    def __call__(self, config: Config) -> Measurement | None:
        if config not in self.cache:
            ok = not violations(self.problem, config, self.profile.module_order)
            if ok and self.space is not None:
                ok = not self.space.outside(self.problem, self.profile, config)
            profile = profile_at_micro_batch(self.problem, config, self.profile)
            self.cache[config] = (
                estimate(self.problem, config, profile, self.constants, self.headroom, shared=True)
                if ok
                else None
            )  # only read
        return self.cache[config]


def screen_rank(m: Measurement | None) -> tuple[Any, ...]:
    """Feasible first, then throughput; infeasible ranked by how far over they are."""
    if m is None:
        return (0, float("-inf"))
    return (1, m.throughput or 0.0) if m.feasible else (0, -m.violation)


def climb(screen: Screen, space: SearchSpace, start: Config, rounds: int = 24) -> Config:
    """Steepest ascent on (feasible, estimated throughput) over single-knob changes.

    The IPU layout stays as it starts: callers climb once per layout.
    """
    best, best_score = start, screen_rank(screen(start))
    for _ in range(rounds):
        step, step_score = None, best_score
        for knob, candidate in screen.candidates(space, best):
            if knob == "ipus_per_replica":
                continue
            score = screen_rank(screen(candidate))
            if score > step_score:
                step, step_score = candidate, score
        if step is None:
            break
        best, best_score = step, step_score
    return best


def proposals(
    problem: Problem,
    profile: ModelProfile,
    space: SearchSpace,
    baseline: Config,
    limit: int = 6,
    constants: EstimatorConstants = NOMINAL,
    headroom: float = 0.0,
    prepare: Callable[[Config], Config] | None = None,
    safety: float = 0.10,
) -> list[Proposal]:
    """The baseline first (as given), then distinct estimator-guided candidates, most useful first.

    On hardware each is a compile. Second comes the fastest configuration with `safety`
    more tile memory free than the headroom asks (likely to fit even where the model is
    optimistic), then the fastest ones per IPU layout, then the cheapest single change that
    makes the baseline fit and the memory-balanced split (both to show what matters).
    """
    screen = Screen(problem, profile, constants, headroom, prepare, space)
    safe = Screen(problem, profile, constants, min(0.5, headroom + safety), prepare, space)
    out = [Proposal(baseline, BASELINE_ORIGIN)]
    seen = {baseline}

    def add(config: Config, origin: str) -> None:
        if config not in seen and screen(config) is not None and len(out) < limit:
            seen.add(config)
            out.append(Proposal(config, origin))

    # (score, knob, config, its estimate) of each single change that fits
    fixes = sorted(
        (
            (screen_rank(m), knob, c, m)
            for knob, c in screen.candidates(space, baseline)
            if (m := screen(c)) is not None and m.feasible
        ),
        key=lambda t: t[0],
        reverse=True,
    )

    # Climb from the best fix and from the baseline moved to every other IPU layout: going
    # from a pipeline to replicas needs several knobs at once, which one climb won't do.
    starts = [config for _, _, config, _ in fixes[:3]] or [
        screen.prepare(space.project(problem, profile, baseline))
    ]
    starts += [
        moved for knob, moved in screen.candidates(space, baseline) if knob == "ipus_per_replica"
    ]
    safe_best = max(
        dict.fromkeys(climb(safe, space, s) for s in starts), key=lambda c: screen_rank(safe(c))
    )
    safe_end = safe(safe_best)
    if safe_end is not None and safe_end.feasible:
        add(safe_best, f"climb, {safe.headroom:.0%} free")
    climbed = sorted(
        dict.fromkeys(climb(screen, space, s) for s in starts),
        key=lambda c: screen_rank(screen(c)),
        reverse=True,
    )
    for config in climbed[:2]:
        add(config, f"climb {config.ipus_per_replica}ipu x{config.replicas}")
    base = screen(baseline)
    if fixes and not (base is not None and base.feasible):  # a baseline that fits needs no fix
        # The fix that keeps most of the baseline: the smallest change that fits.
        _, knob, config, _ = min(fixes, key=lambda t: t[3].throughput or 0.0)
        add(config, f"fix: {knob.replace('_', ' ')}")
    if baseline.ipus_per_replica > 1:
        balanced = baseline.replace(splits=balanced_splits(problem, profile, baseline, "memory"))
        add(screen.prepare(space.project(problem, profile, balanced)), "balanced by memory")
    return out
