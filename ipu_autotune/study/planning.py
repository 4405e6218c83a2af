"""`plan`'s search at one IPU count: `tune --ipus N`'s own, on the estimate backend, in memory.

A plan row is what `ipu-autotune MODEL --batch-size B --ipus N --backend estimate` finds with
its default trials: the same space, the same numerics answer applied the same way
(`advised`), the same warm starts (guide/warmstart.proposals), the same sampler and runner
(study/records, study/runner), without storage, a console or files. `tune` builds its
estimate-backend study from the same functions (`advised`, `warm_starts`), so a row and a
`tune` run of the same problem differ only by the sampler's seed. A larger size also gets
the smaller size's best as one more start (`carried`): what fits on N IPUs fits on 2N.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from ..backends.base import Measurement
from ..batch import micro_batch
from ..errors import UsageError
from ..guide.proposal import Proposal
from ..problem import Config, Problem
from . import records as st
from .runner import Runner

if TYPE_CHECKING:  # types only
    from ..numerics.answer import NumericsAdvice
    from ..profiles.model_profile import ModelProfile
    from ..search.space import SearchSpace

#: `tune`'s default number of new trials (options.DEFAULT_TRIALS is this)
DEFAULT_TRIALS = 60
#: the knobs the numerics answer sets (tune leaves them out of the space it searches)
NUMERIC_KNOBS = ("loss_scaling", "stochastic_rounding", "partials")
#: the origin of the smaller size's best, enqueued as one more start at the next size
CARRIED = "the smaller size's best"


def numerics_unmeasured(problem: Problem, space: SearchSpace) -> str | None:
    """Why the numerics answer has nothing to measure for this problem, or None when it does."""
    precision = space.knobs["precision"]
    if all(v == "32.32" for v in getattr(precision, "values", ())):
        return "nothing runs in FP16"
    if problem.inputs or problem.token_inputs:
        return (
            "the gradient statistics run feeds one float image batch, and this model takes "
            "token ids or named inputs"
        )
    return None


def numerics_answer(problem: Problem, space: SearchSpace, seed: int = 0) -> NumericsAdvice | None:
    """The one numerics answer (numerics/advice.advise, seeded as tune seeds it), or None where
    it cannot be measured or its run fails (the knobs are then searched, as tune does)."""
    if numerics_unmeasured(problem, space):
        return None
    from ..numerics.advice import advise

    try:
        return advise(problem, seed=seed)
    except UsageError:
        raise
    except Exception:  # advice is an aid: without it the search covers these knobs
        return None


def advised(advice: NumericsAdvice, space: SearchSpace) -> Callable[[Config], Config]:
    """Apply the advice to a config, except where the user's space fixed a knob."""

    def prepare(config: Config) -> Config:
        out = advice.apply(config)
        kept = {k: getattr(config, k) for k in NUMERIC_KNOBS if k in space.user_knobs}
        return out.replace(**kept) if kept else out

    return prepare


def warm_starts(
    problem: Problem,
    profile: ModelProfile,
    space: SearchSpace,
    baseline: Config,
    headroom: float,
    prepare: Callable[[Config], Config] | None,
) -> list[Proposal]:
    """The estimate-backend study's first trials (tune's on_create enqueues these)."""
    from ..guide.warmstart import proposals

    return proposals(problem, profile, space, baseline, headroom=headroom, prepare=prepare)


@dataclasses.dataclass
class Searched:
    """One search's answer: the fastest fitting trial, else the closest; the numerics applied."""

    best: st.TrialRecord | None
    closest: st.TrialRecord | None
    advice: Any = None


def search(
    problem: Problem,
    headroom: float,
    fit_confidence: float | None,
    trials: int = DEFAULT_TRIALS,
    seed: int | None = 0,
    carried: Sequence[Config] = (),
) -> Searched:
    """`tune`'s estimate-backend study of `problem` (a fresh one, in memory), `trials` trials."""
    from ..backends.estimate import EstimateBackend
    from ..backends.estimate.error_bars import kept_free
    from ..guide.warmstart import naive_baseline
    from ..profiles.trace import profile_for
    from ..search.space import SearchSpace

    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    advice = numerics_answer(problem, space)
    prepare = None
    if advice is not None:
        space = space.without(*NUMERIC_KNOBS)
        prepare = advised(advice, space)
    baseline = naive_baseline(problem, profile)
    free = kept_free(problem.model, headroom, fit_confidence)
    backend = EstimateBackend(headroom=headroom, fit_confidence=fit_confidence)

    def on_create(study: optuna.Study) -> None:
        study.set_user_attr(st.ATTR_SPACE, space.to_dict())
        items = warm_starts(problem, profile, space, baseline, free, prepare)
        seen = {p.config for p in items}
        items += [
            Proposal(c, CARRIED)
            for c in carried
            if c not in seen and _valid(problem, profile, space, c)
        ]
        st.enqueue(study, space, problem, profile, items)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study, _ = st.open_study(
        optuna.storages.InMemoryStorage(), problem.slug, problem, seed, on_create
    )
    runner = Runner(study, problem, profile, space, backend, adjust=prepare)
    runner.run(trials)
    best = st.best_record(study, skip_unreadable=True)
    return Searched(best, None if best else st.closest_record(st.records(study)), advice)


def _valid(problem: Problem, profile: ModelProfile, space: SearchSpace, config: Config) -> bool:
    """A carried configuration the space can express at this size (it is enqueued as params)."""
    from ..rules.cross_field import violations

    if violations(problem, config, profile.module_order):
        return False
    try:
        space.params_for(problem, profile, config)
    except (KeyError, ValueError):
        return False
    return True


@dataclasses.dataclass
class SizePlan:
    """One hardware size: the search's fastest fitting configuration at the largest micro-batch
    (at most the problem's) where one fits, else the closest one; `why` says what a reader of
    the row would ask (slower per IPU, or a busier tile, than the size before)."""

    ipus: int
    micro_batch: int
    config: Config
    measurement: Measurement
    why: str = ""

    @property
    def fits(self) -> bool:
        return self.measurement.feasible

    def to_dict(self) -> dict[str, Any]:
        return {
            "ipus": self.ipus,
            "micro_batch": self.micro_batch,
            "fits": self.fits,
            "config": self.config.to_dict(),
            "measurement": self.measurement.to_dict(),
            "why": self.why,
        }


def micro_batches(problem: Problem) -> list[int]:
    """The problem's micro-batch, halved down to 1."""
    out, bs = [], problem.batch_size
    while bs >= 1:
        out.append(bs)
        bs //= 2
    return out


def has_layout(problem: Problem) -> bool:
    from ..profiles.trace import profile_for
    from ..search.space import SearchSpace

    return bool(SearchSpace.load(problem).ipu_layouts(problem, profile_for(problem)))


def plan_size(
    problem: Problem,
    ipus: int,
    headroom: float,
    fit_confidence: float | None,
    carried: SizePlan | None = None,
    trials: int = DEFAULT_TRIALS,
) -> SizePlan | None:
    """The search's best on `ipus` IPUs, halving the micro-batch until one fits (at the
    micro-batch a smaller size fitted at, that size's best is enqueued: it fits here too); None
    when the model has no layout on that many (more stages than units)."""
    from ..guide.least_memory import certainly_over

    closest: SizePlan | None = None
    if certainly_over(dataclasses.replace(problem, ipus=ipus), ipus):
        return _certain_row(
            dataclasses.replace(problem, ipus=ipus, batch_size=1), headroom, fit_confidence
        )
    for bs in micro_batches(problem):
        sized = dataclasses.replace(problem, ipus=ipus, batch_size=bs)
        if not has_layout(sized):
            return None
        keep = [carried.config] if carried is not None and carried.micro_batch == bs else []
        found = search(sized, headroom, fit_confidence, trials, carried=keep)
        record = found.best or found.closest
        if record is None:
            continue
        row = SizePlan(ipus, micro_batch(sized, record.config), record.config, record.measurement)
        if found.best is not None:
            return row
        if closest is None or row.measurement.violation < closest.measurement.violation:
            closest = row
    return closest


#: a size whose best reaches this share of the host's ceiling leaves larger sizes nothing to gain
AT_HOST_CEILING = 0.97


def host_ceiling(problem: Problem) -> float:
    """The most samples/s the host input pipeline can feed, whatever the IPUs: loader workers
    over seconds per sample, at the space's best host knobs (host/pipeline.end_to_end's host
    side without its per-call cost, so an upper bound)."""
    from ..host.pipeline import host_costs, parallel_loaders
    from ..search.space import SearchSpace

    knobs = SearchSpace.load(problem).knobs
    costs = host_costs(problem)
    workers = getattr(knobs["loader_workers"], "values", None) or (0,)
    eight_bit = getattr(knobs["eight_bit_io"], "values", None) or (False,)
    base = Config()
    return max(
        parallel_loaders(base.replace(loader_workers=w), costs)
        / costs.sample_s(base.replace(eight_bit_io=e))
        for w in workers
        for e in eight_bit
    )


def _host_bound(problem: Problem, before: SizePlan | None, n: int) -> SizePlan | None:
    """The row at `n` IPUs when the size before already reaches the host's ceiling at the
    problem's micro-batch: its configuration, since no search at a larger size can be faster
    (every configuration there is fed by the same host)."""
    if before is None or not before.fits or before.micro_batch != problem.batch_size:
        return None
    ceiling = host_ceiling(problem)
    if (
        not before.measurement.throughput
        or before.measurement.throughput < AT_HOST_CEILING * ceiling
    ):
        return None
    return SizePlan(
        n,
        before.micro_batch,
        before.config,
        before.measurement,
        f"the host input caps every size at {ceiling:,.0f} samples/s, reached at "
        f"{before.ipus} IPUs: "
        f"the same configuration (more IPUs cannot be faster)",
    )


def _certain_row(
    problem: Problem, headroom: float, fit_confidence: float | None
) -> SizePlan | None:
    """Where no configuration can fit whatever the compiler decides
    (guide/least_memory.certainly_over), no search can find one: the row is the space's
    cheapest configuration in exact bytes (the layout of least_memory.least_on_one_ipu, FP16
    weights, half state offloaded and sharded, no accumulation, splits balanced by memory) at
    micro-batch 1, estimated, to show how far."""
    from ..backends.estimate import EstimateBackend
    from ..guide.balanced_splits import balanced_splits
    from ..guide.least_memory import least_on_one_ipu
    from ..profiles.trace import profile_for
    from ..search.space import SearchSpace

    if not has_layout(problem):
        return None
    profile, space = profile_for(problem), SearchSpace.load(problem)
    least = least_on_one_ipu(problem, problem.ipus)
    per_replica, replicas = (
        (least[1], least[2]) if least else max(space.ipu_layouts(problem, profile))
    )
    cheapest = Config(
        ipus_per_replica=per_replica,
        replicas=replicas,
        precision="16.16",
        optimizer_state="half",
        optimizer_offload=True,
        replicated_tensor_sharding=replicas > 1,
        gradient_accumulation=1,
        execution="sharded" if per_replica > 1 else "pipelined",
    )
    cheapest = cheapest.replace(splits=balanced_splits(problem, profile, cheapest, "memory"))
    config = space.project(problem, profile, cheapest)
    m = EstimateBackend(headroom=headroom, fit_confidence=fit_confidence).measure(problem, config)
    return SizePlan(problem.ipus, 1, config, m)


def planned(
    problem: Problem,
    headroom: float,
    fit_confidence: float | None,
    sizes: Iterable[int],
    trials: int = DEFAULT_TRIALS,
) -> Iterable[SizePlan]:
    """One size at a time, smallest first, each starting from the one before (a caller that
    has its answer stops planning)."""
    from ..guide.least_memory import certain_reason
    from ..guide.nofit import row_reason

    before: SizePlan | None = None
    for n in sizes:
        capped = _host_bound(problem, before, n)
        if capped is not None:
            yield capped
            continue
        sized = plan_size(problem, n, headroom, fit_confidence, before, trials)
        if sized is None:
            continue
        sized.why = certain_reason(dataclasses.replace(problem, ipus=n), n) or row_reason(
            before, sized
        )
        before = sized
        yield sized


def plan(
    problem: Problem,
    headroom: float,
    fit_confidence: float | None,
    sizes: tuple[int, ...] | None = None,
    trials: int = DEFAULT_TRIALS,
) -> list[SizePlan]:
    from ..guide.least_memory import SIZES

    return list(
        planned(problem, headroom, fit_confidence, SIZES if sizes is None else sizes, trials)
    )


def smallest_fit(plans: list[SizePlan]) -> SizePlan | None:
    return next((p for p in plans if p.fits), None)


def closest_plan(plans: list[SizePlan]) -> SizePlan:
    """The size whose best configuration comes nearest to fitting (the levers start from it)."""
    return min(plans, key=lambda p: p.measurement.violation)
