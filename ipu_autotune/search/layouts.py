"""The IPU layouts and micro-batches a space's knobs allow for a problem: the choices that
depend only on the problem (and the model's units), asked first when a config is sampled.
"""

from __future__ import annotations

from ..batch import accumulation_for_global_batch
from ..problem import Problem
from ..profiles.model_profile import ModelProfile
from ..profiles.optimum_placement import stage_candidates
from ..rules.cross_field import min_pipeline_accumulation
from .knobs import MICRO_BATCH_SEARCH, Choice, Knob, Range


def ipu_layouts(
    knobs: dict[str, Knob], problem: Problem, profile: ModelProfile
) -> list[tuple[int, int]]:
    """(ipus_per_replica, replicas) pairs this space allows for the problem."""
    layouts = []
    starts = stage_candidates(problem, profile)
    per_replica = knobs["ipus_per_replica"]
    candidates = (
        per_replica.values
        if isinstance(per_replica, Choice)
        else range(int(per_replica.low), int(per_replica.high) + 1)
    )
    for ipr in candidates:
        if ipr < 1 or ipr & (ipr - 1) or ipr > problem.ipus or ipr > len(profile.units):
            continue
        if starts is not None and ipr - 1 > len(
            starts
        ):  # --trainer optimum: a layer per stage start
            continue
        for r in _replica_options(knobs, problem, ipr):
            if problem.global_batch and not any(
                accumulation_for_global_batch(problem, r, mb)
                for mb in micro_batches(knobs, problem)
            ):
                continue
            layouts.append((ipr, r))
    return layouts


def micro_batches(knobs: dict[str, Knob], problem: Problem) -> list[int]:
    """Micro-batches this space tries: the problem's alone unless the knob is on."""
    knob = knobs["micro_batch"]
    if isinstance(knob, Range):
        return [m for m in range(max(1, int(knob.low)), int(knob.high) + 1)]
    if knob.values == ("off",):
        return [problem.batch_size]
    if knob.values == ("search",):
        return [m for m in MICRO_BATCH_SEARCH if m <= problem.dataset_size]
    return [int(m) for m in knob.values]


def _replica_options(knobs: dict[str, Knob], problem: Problem, ipr: int) -> list[int]:
    most = problem.ipus // ipr
    most = 1 << (most.bit_length() - 1)  # power of two total IPUs
    knob = knobs["replicas"]
    if isinstance(knob, Choice) and knob.values == ("max",):
        return [most]
    if isinstance(knob, Choice):
        return [
            r for r in knob.values if isinstance(r, int) and 1 <= r <= most and not r & (r - 1)
        ]
    return [
        r for r in range(max(1, int(knob.low)), min(most, int(knob.high)) + 1) if not r & (r - 1)
    ]


def min_accumulation(problem: Problem, ipr: int, execution: str) -> int:
    return min_pipeline_accumulation(problem, ipr) if execution == "pipelined" else 1
