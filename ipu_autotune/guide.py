"""Estimator-guided proposals during a study, corrected by what the compiles showed.

The analytical model is off for any real IPU by some tens of percent, mostly in memory
(code size, tile imbalance). Each compile tells us by how much: the profile gives the
busiest tile of every IPU even when the compile runs out of memory. The guide scales the
estimator's busiest-tile prediction by the largest ratio seen (conservative: OOM costs a
compile), climbs again on the corrected model from the best configurations measured so
far, and proposes the first result not yet tried. Ranking by throughput needs no
correction: a constant factor does not change which candidate is fastest.

With the estimate backend there is nothing to learn (the measurements are the model), so
the study does not use a guide there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from .backends.estimate import estimate
from .backends.estimate.constants import NOMINAL, EstimatorConstants
from .models.trace import ModelProfile
from .problem import Config, Problem
from .search.space import SearchSpace
from .warmstart import Screen, climb


def memory_correction(problem: Problem, profile: ModelProfile, measured: Sequence, constants: EstimatorConstants,
                      floor: float = 1.0) -> float:
    """Largest measured/estimated busiest-tile ratio over compiled trials (at least `floor`)."""
    ratios = []
    for config, m in measured:
        if m.source == "estimate" or not m.max_tile_bytes:
            continue
        predicted = estimate(problem, config, profile, constants)
        for got, want in zip(m.max_tile_bytes, predicted.max_tile_bytes):
            if want > 0:
                ratios.append(got / want)
    return max([floor, *ratios]) if ratios else floor


class Guide:
    """Proposes the next configuration to compile, or None to let the sampler choose."""

    def __init__(self, problem: Problem, profile: ModelProfile, space: SearchSpace, headroom: float = 0.05,
                 prepare: Callable[[Config], Config] | None = None, constants: EstimatorConstants = NOMINAL,
                 starts: int = 3):
        self.problem, self.profile, self.space = problem, profile, space
        self.headroom, self.prepare, self.constants, self.starts = headroom, prepare, constants, starts
        self.correction = 1.0

    def propose(self, measured: Sequence, tried: set[Config]) -> Config | None:
        """`measured`: (config, Measurement) of finished trials; `tried`: every config asked so far."""
        self.correction = memory_correction(self.problem, self.profile, measured, self.constants)
        corrected = replace(self.constants, tile_imbalance=self.constants.tile_imbalance * self.correction)
        screen = Screen(self.problem, self.profile, corrected, self.headroom, self.prepare, self.space)
        fits = [(m.throughput or 0.0, c) for c, m in measured if m.feasible and m.failure is None]
        fits.sort(key=lambda t: t[0], reverse=True)
        starts = [c for _, c in fits[:self.starts]]
        if not starts:
            # Nothing fits yet: climb from the configs nearest to fitting.
            near = sorted(((m.violation, c) for c, m in measured if m.failure in (None, "oom")),
                          key=lambda t: t[0])
            starts = [c for _, c in near[:self.starts]]
        for start in starts:
            candidate = climb(screen, self.space, start)
            result = screen(candidate)
            if candidate not in tried and result is not None and result.feasible:
                return candidate
        return None
