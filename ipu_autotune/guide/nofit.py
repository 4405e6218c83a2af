"""When nothing fits: what the closest trial lacks, the hardware the model needs, and the
problem changes that help.

`plan` answers "how many IPUs does this model need, and how fast is it on each?": at each
size (1 to 64 IPUs, the micro-batch halved down to 1 until something fits) the estimator's
warm-start search (guide/warmstart.proposals: its climbs per IPU layout) finds the fastest
configuration that fits under the error bar, without a study or a compile. Where nothing fits
at any size, `why_nothing_fits` names the stage no split can shrink (one unit, on one IPU)
and `levers` re-estimates it with what lies outside the space (a larger serialisation factor,
a shorter sequence). The exit-3 advice of `tune` (`best_changes`) quotes the plan and keeps
only changes the estimate puts closer to fitting than the closest trial.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..backends.base import Backend, Measurement, format_bytes
from ..problem import Config, Problem
from ..rules.cross_field import violations

if TYPE_CHECKING:  # types only: imported where used, as plan_size does
    from ..profiles.model_profile import ModelProfile
    from ..search.space import SearchSpace

#: the exit code of a study in which no trial fits (documented in the README and cli.py)
EXIT_NOTHING_FITS = 3


@dataclass
class Change:
    flag: str  # e.g. "--batch-size 16"
    result: str  # what the estimator says of the closest configuration with it
    fits: bool
    tile_fraction: float  # the busiest tile against tile memory, with the change

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def lacks(m: Measurement) -> str:
    """'the busiest tile of IPU1 needs 135% of tile memory (312 MB more on that IPU)'."""
    if m.failure not in (None, "oom"):
        return f"{m.failure}: {m.reason}" if m.reason else m.failure
    worst = m.worst_overflow()
    if worst is None or not m.tile_capacity_bytes:
        return m.verdict()
    ipu, over = worst
    used = m.max_tile_bytes[ipu] / m.tile_capacity_bytes
    more = f" ({format_bytes(over)} more on that IPU)" if over else ""
    keep = f"; estimates must also keep {m.headroom:.0%} free" if m.headroom else ""
    return f"the busiest tile of IPU{ipu} needs {used:.0%} of a tile's memory{more}{keep}"


def _fraction(m: Measurement) -> float:
    if not m.max_tile_bytes or not m.tile_capacity_bytes:
        return float("inf")
    return max(m.max_tile_bytes) / m.tile_capacity_bytes


def smaller_batch(problem: Problem, config: Config, backend: Backend) -> Change | None:
    """Halve the micro-batch until the closest configuration fits (or micro-batch 1)."""
    if problem.batch_size == 1:
        return None
    bs, m, trial_problem = problem.batch_size, None, problem
    while bs > 1:
        bs //= 2
        trial_problem = dataclasses.replace(problem, batch_size=bs)
        candidate = config
        if problem.global_batch:  # the global batch stays: accumulate more
            candidate = config.replace(gradient_accumulation=max(1, problem.global_batch // (bs * config.replicas)))
        if violations(trial_problem, candidate, None):
            continue
        m = backend.measure(trial_problem, candidate)
        if m.feasible:
            break
    if m is None:
        return None
    verdict = "the closest configuration fits" if m.feasible else \
        f"busiest tile still at {_fraction(m):.0%}"
    return Change(f"--batch-size {bs}", f"{verdict} (estimated)", m.feasible, _fraction(m))


def more_ipus(problem: Problem, headroom: float, fit_confidence: float | None) -> list[Change]:
    """The plan at the sizes above the problem's: the smallest that fits, with its best
    configuration; when none does, one statement that no size fits, why, and what would."""
    plans: list[SizePlan] = []
    for sized in planned(problem, headroom, fit_confidence, tuple(n for n in SIZES if n > problem.ipus)):
        plans.append(sized)
        if sized.fits and sized.micro_batch == problem.batch_size:
            break  # no larger size changes the answer below (the `plan` command shows them all)
    if not plans:
        return []
    fit = smallest_fit(plans)
    if fit is not None:
        # the smallest size that fits at the asked micro-batch, and a smaller one at a smaller
        # micro-batch where there is one
        same = next((p for p in plans if p.fits and p.micro_batch == problem.batch_size), None)
        picks = [fit] if same is None or same is fit else [fit, same]
        return [_size_change(problem, p) for p in picks]
    closest = closest_plan(plans)
    said = "; ".join([why_nothing_fits(problem, plans), *levers(problem, closest, headroom, fit_confidence)])
    return [Change("", f"no IPU count up to {max(SIZES)} fits (estimated): {said}", False, _fraction(closest.measurement))]


def _size_change(problem: Problem, fit: SizePlan) -> Change:
    m, smaller = fit.measurement, fit.micro_batch != problem.batch_size
    flag = f"--ipus {fit.ipus}" + (f" --batch-size {fit.micro_batch}" if smaller else "")
    at = f"micro-batch {fit.micro_batch}" if smaller else "the same micro-batch"
    return Change(flag, f"the smallest size that fits at {at}: {layout_text(fit.config)}, {m.throughput:,.0f} "
                        "samples/s (estimated; ipu-autotune plan shows every size)", True, _fraction(m))


def layout_text(config: Config) -> str:
    """'2x4 pipe 16.16': IPUs per replica x replicas, how a replica's IPUs run, the precision."""
    how = "" if config.ipus_per_replica == 1 else {"pipelined": " pipe", "sharded": " shard"}.get(
        config.execution, f" {config.execution}")
    return f"{config.ipus_per_replica}x{config.replicas}{how} {config.precision}"


def best_changes(problem: Problem, config: Config, headroom: float, closest: Measurement | None = None,
                 fit_confidence: float | None = None) -> list[Change]:
    """The changes that help, the one that helps most first (fits, then the lower busiest
    tile). A change the estimate puts no closer to fitting than the `closest` trial is left
    out: the advice never sends a user to hardware that is no better. A statement that no
    size fits (its flag empty) is kept: it is the answer."""
    from ..backends.estimate import EstimateBackend

    backend = EstimateBackend(headroom=headroom, fit_confidence=fit_confidence)
    found = [*more_ipus(problem, headroom, fit_confidence), smaller_batch(problem, config, backend)]
    floor = _fraction(closest) if closest is not None else float("inf")
    kept = [c for c in found if c is not None and (c.fits or c.tile_fraction < floor or not c.flag)]
    return sorted(kept, key=lambda c: (not c.fits, bool(c.flag), c.tile_fraction))


# --- the plan: the hardware the model needs ------------------------------------------------------

#: the IPU counts a plan tries: IPU-POD4 to IPU-POD64 and one or two IPUs of a machine
SIZES = (1, 2, 4, 8, 16, 32, 64)
#: the share of a tile one tensor's weights take, spread over the IPU's tiles, from which
#: `why_nothing_fits` names that tensor as what no split can shrink
TENSOR_SHARE = 0.25


@dataclass
class SizePlan:
    """One hardware size: the fastest configuration the estimate puts under the error bar at
    the largest micro-batch (at most the problem's) where one fits, else the closest one."""

    ipus: int
    micro_batch: int
    config: Config
    measurement: Measurement

    @property
    def fits(self) -> bool:
        return self.measurement.feasible

    def to_dict(self) -> dict:
        return {"ipus": self.ipus, "micro_batch": self.micro_batch, "fits": self.fits,
                "config": self.config.to_dict(), "measurement": self.measurement.to_dict()}


def _micro_batches(problem: Problem) -> list[int]:
    out, bs = [], problem.batch_size
    while bs >= 1:
        out.append(bs)
        bs //= 2
    return out


def plan_size(problem: Problem, ipus: int, headroom: float, fit_confidence: float | None) -> SizePlan | None:
    """The fastest fitting configuration on `ipus` IPUs, halving the micro-batch until one
    fits; None when the model has no layout on that many (more stages than units)."""
    from ..backends.estimate import EstimateBackend
    from ..backends.estimate.error_bars import kept_free
    from ..profiles.trace import profile_for
    from ..search.space import SearchSpace

    backend = EstimateBackend(headroom=headroom, fit_confidence=fit_confidence)
    closest = None
    for bs in _micro_batches(problem):
        sized = dataclasses.replace(problem, ipus=ipus, batch_size=bs)
        profile = profile_for(sized)
        space = SearchSpace.load(sized)
        if not space.ipu_layouts(sized, profile):
            return None
        judged = [SizePlan(ipus, bs, c, backend.measure(sized, c))
                  for c in _climbed(sized, profile, space, kept_free(sized.model, headroom, fit_confidence))]
        if not judged:
            continue
        fits = [j for j in judged if j.fits and j.measurement.throughput]
        if fits:
            return max(fits, key=lambda j: j.measurement.throughput or 0.0)  # each has one (above)
        nearest = min(judged, key=lambda j: j.measurement.violation)
        closest = nearest if closest is None or nearest.measurement.violation < closest.measurement.violation \
            else closest
    return closest


def _climbed(problem: Problem, profile: ModelProfile, space: SearchSpace, headroom: float) -> list[Config]:
    """The warm starts' climbs (guide/warmstart.climb) from the newcomer's baseline and from it
    moved to every other IPU layout, without the safer second climbs a study's warm starts
    add: one climb per layout is what a plan needs."""
    from .warmstart import Screen, climb, naive_baseline

    screen = Screen(problem, profile, headroom=headroom, space=space)
    baseline = naive_baseline(problem, profile)
    starts = [space.project(problem, profile, baseline)]
    starts += [moved for knob, moved in screen.candidates(space, baseline) if knob == "ipus_per_replica"]
    climbed = dict.fromkeys(climb(screen, space, start) for start in starts)
    return [c for c in climbed if screen(c) is not None]  # a climb that found no valid step stays invalid


def plan(problem: Problem, headroom: float, fit_confidence: float | None,
         sizes: tuple[int, ...] = SIZES) -> list[SizePlan]:
    """`plan_size` at every size with a layout, smallest first."""
    return list(planned(problem, headroom, fit_confidence, sizes))


def planned(problem: Problem, headroom: float, fit_confidence: float | None,
            sizes: tuple[int, ...]) -> Iterator[SizePlan]:
    """`plan`, one size at a time: a caller that has its answer stops planning."""
    for n in sizes:
        sized = plan_size(problem, n, headroom, fit_confidence)
        if sized is not None:
            yield sized


def smallest_fit(plans: list[SizePlan]) -> SizePlan | None:
    return next((p for p in plans if p.fits), None)


def closest_plan(plans: list[SizePlan]) -> SizePlan:
    """The size whose best configuration comes nearest to fitting (the levers start from it)."""
    return min(plans, key=lambda p: p.measurement.violation)


def why_nothing_fits(problem: Problem, plans: list[SizePlan]) -> str:
    """At the size that came closest, its configuration's busiest tile against a tile's memory,
    the units its IPU holds, and their largest tensor spread over the IPU's tiles: a pipeline
    places whole units, so no split shrinks that tensor."""
    from ..backends.targets import get_target
    from ..profiles.trace import profile_for
    from ..search.space import SearchSpace

    last = closest_plan(plans)
    m = last.measurement
    ipu = m.worst_ipu()
    if ipu is None or not m.tile_capacity_bytes or "stage_units" not in m.details:
        return f"at {last.ipus} IPUs the closest configuration is {m.verdict()}"
    profile = profile_for(dataclasses.replace(problem, ipus=last.ipus, batch_size=last.micro_batch))
    first, end = m.details["stage_units"][ipu]
    units = profile.units[first:end + 1]
    top = max(m.breakdown[ipu], key=m.breakdown[ipu].__getitem__)
    held = units[0].path if len(units) == 1 else f"{units[0].path} to {units[-1].path}"
    said = (f"at {last.ipus} IPUs (micro-batch {last.micro_batch}) the closest configuration's busiest tile, on "
            f"IPU{ipu}, needs {_kb(m.max_tile_bytes[ipu])} against a tile's "
            f"{_kb(m.tile_capacity_bytes)} ({m.max_tile_bytes[ipu] / m.tile_capacity_bytes:.0%}; "
            f"largest part {top}, {format_bytes(m.breakdown[ipu][top])} on the IPU); IPU{ipu} holds {held}")
    heaviest = max(units, key=lambda u: u.largest_param)
    tiles = get_target(problem.target).tiles
    tensor = heaviest.largest_param * (2 if last.config.half_weights else 4)
    share = tensor / tiles / m.tile_capacity_bytes
    if len(units) > 1 and share < TENSOR_SHARE:
        # Several units, none large: a longer pipeline than the space's would split them.
        longest = max(n for n, _ in SearchSpace.load(problem).ipu_layouts(
            dataclasses.replace(problem, ipus=max(SIZES)), profile))
        grows = ", which grow with the sequence and the micro-batch" if top in ("activations", "stash", "temporary") \
            else ""
        return (f"{said} ({len(units)} units): the space's longest pipeline is {longest} IPUs per replica, so "
                f"they are not split further; the largest part of the IPU's memory is {top}{grows}")
    return (f"{said}, whose largest tensor ({heaviest.path}, {heaviest.largest_param:,} elements, "
            f"{format_bytes(tensor)} of weights) is {_kb(tensor / tiles)} on each of the IPU's {tiles:,} "
            f"tiles, {share:.0%} of a tile before its optimizer state, gradients and activations; a pipeline "
            "places whole tensors, so no split shrinks it")


def _kb(n: float) -> str:
    """Tile-sized figures in kB, so that 1,160 kB and 639 kB compare at a glance."""
    return f"{n / 1e3:,.0f} kB"


def levers(problem: Problem, closest: SizePlan, headroom: float, fit_confidence: float | None) -> list[str]:
    """What outside the search space would make the closest configuration of a plan fit, each
    re-estimated: a serialisation factor past the space's (PopART's serializedMatMul takes any
    that divides the padded vocabulary), a shorter sequence."""
    from ..backends.estimate import EstimateBackend
    from ..knob_spec import applies

    backend = EstimateBackend(headroom=headroom, fit_confidence=fit_confidence)
    sized = dataclasses.replace(problem, ipus=closest.ipus, batch_size=closest.micro_batch)
    where = f"at {closest.ipus} IPUs, micro-batch {closest.micro_batch}"
    out = []
    if applies("embedding_serialization", sized, closest.config):
        tried = [(f, backend.measure(sized, closest.config.replace(embedding_serialization=f))) for f in (16, 32, 64)]
        f, m = next(((f, m) for f, m in tried if m.feasible), tried[-1])
        out.append(f"embedding_serialization {f} (outside the space, which stops at 8): "
                   + (f"fits {where} (estimated)" if m.feasible else f"busiest tile still {_fraction(m):.0%} {where}"))
    if problem.seq_len > 64:
        seq, shorter = problem.seq_len, None
        while seq > 64 and not (shorter is not None and shorter.feasible):
            seq //= 2
            shorter = backend.measure(dataclasses.replace(sized, seq_len=seq, input_shape=(), decoder_seq_len=0),
                                      closest.config)
        assert shorter is not None  # the loop ran: seq_len > 64
        out.append(f"--seq-len {seq}: " + (f"fits {where} (estimated)" if shorter.feasible
                                           else f"busiest tile still {_fraction(shorter):.0%} {where}"))
    return out
