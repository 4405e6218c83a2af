"""Candidates at the edge of memory: climbs on expected throughput.

The corrected model is off by a few percent even after many compiles, and the best
configuration often sits at the edge of memory, where a climb at the learnt margin never
reaches: a model that says "1.002 of the tile" rules out what in fact fits at 0.993. So the
guide's pool also holds, per IPU layout, the climb on expected throughput (chance to fit x
corrected throughput) from the layout's fastest candidate were it to fit: towards the best
bets near it, trading a little speed for memory where the model is unsure. Which of them is
compiled is the guide's one rule (guide/guide.py: expected gain on the best).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from itertools import product
from typing import Any

from ..problem import Config
from ..search.space import SearchSpace
from .apart import layout
from .corrected import CorrectedModel, Judgement, Observation
from .corrected_screen import CorrectedScreen
from .gain import expected_improvement
from .pairs import best_pair
from .warmstart import Screen, climb

#: the fastest and the leanest single changes a bet's climb pairs (each with each)
BET_PAIRS = 6
#: a climb towards a bet starts from, and passes through, candidates with this chance or more
LONG_SHOT = 0.02


class BetModel(CorrectedModel):
    """The corrected model judged by expected throughput: a candidate counts when its chance
    to fit (the learnt memory model's, with no margin) is at least LONG_SHOT and is worth
    chance x corrected throughput, so a warmstart climb on it (via CorrectedScreen) from a
    fast candidate over memory walks to the best bet near it, trading a little speed for
    memory where the model is unsure."""

    def __init__(
        self, screen: Screen, observations: list[Observation], memory_factor: float = 1.0
    ):
        super().__init__(screen, observations, 0.0, memory_factor=memory_factor)
        self.bets: dict[Config, Judgement | None] = {}

    def judge(self, config: Config) -> Judgement | None:
        """Counts with a LONG_SHOT to fit; worth its expected throughput."""
        if config not in self.bets:
            j = super().judge(config)
            self.bets[config] = (
                None
                if j is None
                else replace(j, fits=j.chance >= LONG_SHOT, worth=j.chance * j.throughput)
            )
        return self.bets[config]

    def throughput(self, config: Config) -> float:
        """Corrected throughput, were it to fit."""
        j = CorrectedModel.judge(self, config)
        return 0.0 if j is None else j.throughput

    def starts(self, pool: Iterable[Config]) -> list[Config]:
        """Per IPU layout, the candidate fastest if it fit, among those with a LONG_SHOT or
        more."""
        fastest: dict[tuple[Any, ...], tuple[float, Config]] = {}
        pool = list(pool)
        self.prefetch(pool)
        for c in pool:
            j = CorrectedModel.judge(self, c)
            if j is None or j.chance < LONG_SHOT:
                continue
            key = layout(c)
            if key not in fastest or j.throughput > fastest[key][0]:
                fastest[key] = (j.throughput, c)
        return [c for _, c in fastest.values()]


class GainModel(BetModel):
    """The corrected model judged by the guide's own rule: a candidate is worth its expected
    improvement on `best` (guide/gain.py), in samples/s, so a climb on it from a layout's
    fastest candidate walks to the compile that layout most likely pays with: often one at
    the edge of memory, which a climb at the learnt margin never reaches."""

    def __init__(
        self,
        screen: Screen,
        observations: list[Observation],
        best: float,
        memory_factor: float = 1.0,
    ):
        super().__init__(screen, observations, memory_factor)
        self.best = best

    def judge(self, config: Config) -> Judgement | None:
        if config not in self.bets:
            j = CorrectedModel.judge(self, config)
            self.bets[config] = (
                None
                if j is None
                else replace(
                    j,
                    fits=j.chance >= LONG_SHOT,
                    worth=expected_improvement(self, config, self.best) * (self.best or 1.0),
                )
            )
        return self.bets[config]


def bet_climb(
    screen: CorrectedScreen, model: BetModel, space: SearchSpace, start: Config, rounds: int = 8
) -> Config:
    """warmstart.climb on expected throughput, then, when no single change helps, pairs of
    one of the fastest single changes (were they to fit) with one of those that free the
    most memory: more accumulation with the optimizer state offloaded, say, where either
    alone is slower or over memory."""
    best = climb(screen, space, start)
    for _ in range(rounds):
        # each with its judgement (judge caches it): the leanest are sorted by its busiest tile
        judged = [
            (c, j)
            for knob, c in screen.candidates(space, best)
            if knob != "ipus_per_replica" and (j := model.judge(c)) is not None
        ]
        singles = [c for c, _ in judged]
        fast = sorted(singles, key=model.throughput, reverse=True)[:BET_PAIRS]
        lean = [c for c, _ in sorted(judged, key=lambda t: t[1].busiest)][:BET_PAIRS]
        top = best_pair(model, best, product(fast, lean))
        if top is None:
            break
        best = climb(screen, space, top)
    return best
