"""The first trials of a new study: the baseline, then estimator-guided candidates.

On hardware every trial is a compile, so the first few must count. The estimator is cheap
(well under a millisecond), so it screens hundreds of candidates here to propose a handful:
balanced pipeline splits, the cheapest single changes that make the baseline fit, and the
result of a greedy climb on estimated throughput from the best of those.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..backends.estimate import estimate, profile_at_micro_batch
from ..backends.estimate.constants import NOMINAL, EstimatorConstants
from ..measurement import Measurement
from ..models import partition
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..profiles.optimum_placement import layer_units, wildcard_cuts
from ..rules.cross_field import min_pipeline_accumulation, violations
from ..search.space import SearchSpace
from .balanced_splits import balanced_splits
from .prior import GuidePrior
from .proposal import Proposal
from .single_changes import single_changes

#: a study's baseline trial; the runner may add a note to it ("baseline (outside your space:
#: ...)"),
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
