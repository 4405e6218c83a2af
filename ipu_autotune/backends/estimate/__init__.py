"""The estimate backend: an analytical model of Mk1/Mk2/Bow IPUs (docs/estimator.md)."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

from ...batch import micro_batch
from ...host import pipeline as host
from ...problem import Config, Problem
from ...profiles.model_profile import ModelProfile
from ...profiles.refine import refined
from ..base import Backend, Measurement
from ..targets import get_target
from .constants import NOMINAL, EstimatorConstants
from .error_bars import bars, confident_fraction, fit_chance
from .layout import Stage, forward_stages, stages
from .memory import stage_memory
from .serialization import serialize_projection
from .timing import Timing, timing


class EstimateBackend(Backend):
    """Predicts memory per IPU by category and step time, from the model traced on `meta`."""

    name = "estimate"
    source = "estimate"

    def __init__(
        self,
        constants: EstimatorConstants = NOMINAL,
        headroom: float = 0.0,
        fit_confidence: float | None = None,
    ):
        self.constants = constants
        self.headroom = headroom
        #: an estimate fits only with at least this chance by its error bar (None: the headroom
        #: alone, as when the estimator screens or guides compiles that settle the question)
        self.fit_confidence = fit_confidence

    @property
    def sdk(self) -> str:
        """Labelled apart from every hardware SDK: an estimate is never calibration data."""
        from ...version import __version__

        return f"estimate-{__version__}"

    def profile(self, problem: Problem) -> ModelProfile:
        # tracing imports torch: reading a study never traces
        from ...profiles.trace import profile_for

        return profile_for(problem)

    def measure(self, problem: Problem, config: Config) -> Measurement:
        return estimate(
            problem,
            config,
            profile_at_micro_batch(problem, config),
            self.constants,
            self.headroom,
            self.fit_confidence,
        )


def profile_at_micro_batch(
    problem: Problem, config: Config, profile: ModelProfile | None = None
) -> ModelProfile:
    """The model traced at the config's micro-batch: `profile` when it is at that batch
    already, else a (cached) trace at it. The Problem stays as it is (batch.py)."""
    batch = micro_batch(problem, config)
    if profile is not None and profile.batch_size == batch:
        return profile
    # tracing imports torch: reading a study never traces
    from ...profiles.trace import profile_for

    return profile_for(problem, batch)


def device_parts(config: Config, time: Timing, k: EstimatorConstants) -> dict[str, float]:
    """Seconds per call of the IPU side, by bottleneck name (host/pipeline.py)."""
    di = config.device_iterations
    return {
        "device compute": di * time.parts["compute"],
        "weight update": di * time.parts["weight_update"],
        "all-reduce": di * time.parts["all_reduce"],
        "host call": k.host_call_overhead_s,
    }


#: estimates already made in this process, by what they depend on (the IPU count of the problem is
#: not one of them: a config uses the IPUs it names), with the profile and constants kept alive so
#: their ids stay their own (constants hold a dict: not hashable). A study's warm starts, its
#: trials and `plan`'s sizes ask for many twice.
_MADE: dict[tuple[Any, ...], tuple[ModelProfile, EstimatorConstants, Measurement]] = {}
_MADE_LIMIT = 20_000


def estimate(
    problem: Problem,
    config: Config,
    profile: ModelProfile,
    constants: EstimatorConstants = NOMINAL,
    headroom: float = 0.0,
    fit_confidence: float | None = None,
    shared: bool = False,
) -> Measurement:
    """`_estimate`, remembered: a pure function of its arguments. Each caller gets a copy whose
    lists and dicts are its own: callers add to a measurement's details and lists
    (backends/screen.py sets `details["screen_violation"]` on a compile built from an
    estimate), and a shallow copy shared those with the remembered one. `shared`: the
    remembered one itself, for a caller that only reads it (guide/warmstart's screen)."""
    key = (
        dataclasses.replace(problem, ipus=1),
        config,
        id(profile),
        id(constants),
        headroom,
        fit_confidence,
    )
    made = _MADE.get(key)
    if made is None:
        if len(_MADE) >= _MADE_LIMIT:
            _MADE.clear()
        made = _MADE[key] = (
            profile,
            constants,
            _estimate(problem, config, profile, constants, headroom, fit_confidence),
        )
    return made[2] if shared else _fresh(made[2])


def _fresh(m: Measurement) -> Measurement:
    """A copy whose lists and dicts are its own (a plain walk over them: copy.deepcopy's memo
    made it a tenth of a search's time)."""
    out = copy.copy(m)
    for name, value in vars(m).items():
        if isinstance(value, (list, dict)):
            setattr(out, name, _copied(value))
    return out


def _copied(x: object) -> object:
    if isinstance(x, list):
        if not any(isinstance(v, (list, dict)) for v in x):
            return list(x)  # numbers: a new list is copy enough
        return [_copied(v) for v in x]
    if isinstance(x, dict):
        return {k: _copied(v) for k, v in x.items()}
    return x


#: the stages a profile's units make, by the placement they depend on (the splits and the
#: checkpoints): a study's configurations share a few placements and differ in the other knobs
_STAGES: dict[tuple[int, tuple[str, ...], tuple[str, ...]], tuple[ModelProfile, list[Stage]]] = {}


def _stages(profile: ModelProfile, config: Config) -> list[Stage]:
    key = (id(profile), config.splits, config.checkpoints)
    kept = _STAGES.get(key)
    if kept is None or kept[0] is not profile:
        if len(_STAGES) >= _MADE_LIMIT:
            _STAGES.clear()
        kept = _STAGES[key] = (profile, stages(profile, config))
    return kept[1]


def _estimate(
    problem: Problem,
    config: Config,
    profile: ModelProfile,
    constants: EstimatorConstants = NOMINAL,
    headroom: float = 0.0,
    fit_confidence: float | None = None,
) -> Measurement:
    """Memory and time of one config. With `headroom`, a config fits only if its busiest
    tile leaves that fraction of the tile free, a margin for the model's own error; with
    `fit_confidence`, also only if its chance to fit by the calibrated error bar is at least
    that (error_bars.fit_chance). This is the one place an estimate's verdict is decided:
    the study ranks by it, the sampler learns from its violation, and the summary reads it."""
    target = get_target(problem.target)
    k = constants
    # Units cut where a split or checkpoint lands inside one (profiles/refine.py).
    profile = refined(profile, config.splits, config.checkpoints)
    layout = serialize_projection(problem, config, profile, list(_stages(profile, config)))
    n = len(layout)
    pipeline_stages = forward_stages(layout, config)
    memories = [stage_memory(problem, config, s, pipeline_stages, target, k) for s in layout]
    time = timing(problem, config, layout, target, k)

    capacity = target.bytes_per_ipu
    compute_tiles = target.tiles - config.io_tiles
    tile = target.bytes_per_tile
    # Per IPU: its busiest tile and the exact share of it (weights, accumulators and optimizer
    # state spread evenly over its tiles), which the error bar does not widen.
    used = [(m.max_tile / tile, m.exact / compute_tiles / tile) for m in memories]
    chance = min(fit_chance(problem.model, p, e) for p, e in used)
    limits = [
        1.0 - headroom
        if fit_confidence is None
        else min(1.0 - headroom, confident_fraction(problem.model, fit_confidence, e))
        for _, e in used
    ]
    feasible = all(p <= limit for (p, _), limit in zip(used, limits, strict=True))
    worst = max(range(n), key=lambda i: used[i][0])
    free = (
        1.0 - limits[worst]
    )  # what the busiest IPU must keep free (Measurement.violation reads it)
    overflow = sum(max(0, m.max_tile - tile) * compute_tiles for m in memories)
    e2e = host.end_to_end(problem, config, device_parts(config, time, k))
    required, max_tile = [mem.required for mem in memories], [mem.max_tile for mem in memories]
    bar = bars(
        problem.model,
        max_tile,
        required,
        [mem.exact for mem in memories],
        compute_tiles,
        tile,
        e2e.throughput,
        time.throughput,
    )
    m = Measurement(
        feasible=feasible,
        source="estimate",
        required_bytes=required,
        capacity_bytes=[capacity] * n,
        max_tile_bytes=max_tile,
        tile_capacity_bytes=target.bytes_per_tile,
        breakdown=[mem.breakdown for mem in memories],
        overflow_bytes=int(overflow),
        throughput=e2e.throughput,
        step_time_s=time.step_time_s,
        failure=None if feasible else "oom",
        reason="" if feasible else _over(headroom, chance, fit_confidence),
        headroom=free,
        details={
            "stage_seconds": time.stage_seconds,
            "time_parts": time.parts,
            "stage_units": [[s.first, s.last] for s in layout],
            "call_shares": {name: round(v, 4) for name, v in e2e.shares.items()},
        },
        device_throughput=time.throughput,
        samples_per_call=host.samples_per_call(problem, config),
        host_bytes_per_call=host.host_bytes_per_call(problem, config),
        bottleneck=e2e.bottleneck,
        bottleneck_share=e2e.bottleneck_share,
        max_tile_bytes_interval=bar.max_tile_bytes,
        required_bytes_interval=bar.required_bytes,
        throughput_interval=bar.throughput,
        device_throughput_interval=bar.device_throughput,
        straddles_tile_limit=bar.straddles_tile_limit,
        fit_chance=round(chance, 4),
        fit_confidence=fit_confidence,
    )
    return m


def _over(headroom: float, chance: float, fit_confidence: float | None) -> str:
    if fit_confidence is not None and chance < fit_confidence:  # the error bar's verdict
        return (
            f"estimated {math.floor(chance * 100):.0f}% chance to fit by the error bar, under the "
            f"{fit_confidence:.0%} asked "
            "(--fit-confidence)"
        )
    return "estimated over tile memory" + (f" less {headroom:.0%} headroom" if headroom else "")
