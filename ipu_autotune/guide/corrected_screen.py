"""The corrected model (guide/corrected.py) as a warmstart.Screen: so warmstart.climb and the
guide's climbs walk the corrected model, with the moves a corrected model makes worth a
compile (guide/moves.py: finer steps, stage boundaries moved together)."""

from __future__ import annotations

from dataclasses import replace

from ..measurement import Measurement
from ..problem import Config
from ..search.space import SearchSpace
from .corrected import CorrectedModel
from .moves import finer_changes, split_moves
from .warmstart import Screen


class CorrectedScreen(Screen):
    """A warmstart.Screen whose answers are corrected (so warmstart.climb climbs the corrected
    model)."""

    def __init__(
        self,
        model: CorrectedModel,
        neighbours: dict[Config, list[tuple[str, Config]]] | None = None,
    ):
        """`neighbours`: a cache of each config's single-knob changes, kept across proposals
        (generating them balances splits on the estimator: the costly part of a climb)."""
        s = model.screen
        super().__init__(s.problem, s.profile, s.constants, 0.0, s.prepare, s.space)
        self.model = model
        self.neighbours = {} if neighbours is None else neighbours

    def candidates(self, space: SearchSpace, config: Config) -> list[tuple[str, Config]]:
        if config not in self.neighbours:
            found = list(super().candidates(space, config))
            found += [("fine", self.prepare(c)) for c in finer_changes(space, config)]
            found += [
                ("splits", self.prepare(space.project(self.problem, self.profile, c)))
                for c in split_moves(self.profile, config)
            ]
            self.neighbours[config] = list(dict.fromkeys(found))
        self.model.prefetch(c for _, c in self.neighbours[config])  # each is judged next
        return self.neighbours[config]

    def __call__(self, config: Config) -> Measurement | None:
        if config not in self.cache:
            j, m = self.model.judge(config), self.model.screen(config)
            # m is None only where j is (judge rejects what the cached screen rejects)
            self.cache[config] = (
                None
                if j is None or m is None
                else replace(
                    m,
                    feasible=j.fits,
                    throughput=j.worth,
                    headroom=0.0,
                    failure=None if j.fits else "oom",
                    max_tile_bytes=[int(j.load * m.tile_capacity_bytes)]
                    if m.tile_capacity_bytes
                    else m.max_tile_bytes,
                )
            )
        return self.cache[config]
