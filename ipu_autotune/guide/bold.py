"""When the guide stalls: bet on a candidate the corrected model puts just over memory.

The corrected model (search/corrected.py) is off by a few percent even after many compiles,
because the error is not one ratio: a real IPU's busiest tile grows differently per kind of
memory (weights, activations, planner temporaries, code), so a config whose mix differs from
everything compiled so far (gradient accumulators appear with accumulation > 1, say) moves
the ratio by a percent or two. The best configuration often sits at the edge of memory, so
a model that says "1.002 of the tile" rules out for good what in fact fits at 0.993, and the
guide keeps compiling safe variations that do not pay.

So after compiles that stall, each candidate is weighed by its chance to fit under the
learnt memory model (guide/memory_model.py: a mean and a spread per IPU). Climbs towards bets follow expected throughput
(chance x corrected throughput); the bet compiled is the candidate with the largest expected
improvement (chance x gain over the best measured: an OOM costs a compile, not the best),
when that is at least BOLD_GAIN of the best and more than the safe choice's gain. An
OOM costs one compile and corrects the model there (the compile's own ratio then dominates
its neighbours), so the next bet is better informed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from itertools import product

from ..problem import Config
from .warmstart import climb
from .corrected import CorrectedModel, CorrectedScreen, Judgement, layout
from .pairs import best_pair

#: a bet's expected improvement (chance to fit x gain) must be at least this fraction of the best measured
BOLD_GAIN = 0.05
#: and have at least this chance to fit
MIN_FIT_CHANCE = 0.25
#: bets stop after this many in a row ran out of memory (the model's error is then larger
#: than its compiles showed: picking the best bets picks where it under-predicts)
BET_LOSSES = 3
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

    def __init__(self, screen, observations):
        super().__init__(screen, observations, 0.0)
        self.bets: dict[Config, Judgement | None] = {}

    def judge(self, config: Config) -> Judgement | None:
        """Counts with a LONG_SHOT to fit; worth its expected throughput."""
        if config not in self.bets:
            j = super().judge(config)
            self.bets[config] = None if j is None else replace(j, fits=j.chance >= LONG_SHOT,
                                                               worth=j.chance * j.throughput)
        return self.bets[config]

    def throughput(self, config: Config) -> float:
        """Corrected throughput, were it to fit."""
        j = CorrectedModel.judge(self, config)
        return 0.0 if j is None else j.throughput

    def starts(self, pool: Iterable[Config]) -> list[Config]:
        """Per IPU layout, the candidate fastest if it fit, among those with a LONG_SHOT or more."""
        fastest: dict = {}
        for c in pool:
            j = CorrectedModel.judge(self, c)
            if j is None or j.chance < LONG_SHOT:
                continue
            key = layout(c)
            if key not in fastest or j.throughput > fastest[key][0]:
                fastest[key] = (j.throughput, c)
        return [c for _, c in fastest.values()]


def bet_climb(screen: CorrectedScreen, model: BetModel, space, start: Config, rounds: int = 8) -> Config:
    """warmstart.climb on expected throughput, then, when no single change helps, pairs of
    one of the fastest single changes (were they to fit) with one of those that free the
    most memory: more accumulation with the optimizer state offloaded, say, where either
    alone is slower or over memory."""
    best = climb(screen, space, start)
    for _ in range(rounds):
        singles = [c for knob, c in screen.candidates(space, best)
                   if knob != "ipus_per_replica" and model.judge(c) is not None]
        fast = sorted(singles, key=model.throughput, reverse=True)[:BET_PAIRS]
        lean = sorted(singles, key=lambda c: model.judge(c).busiest)[:BET_PAIRS]
        top = best_pair(model, best, product(fast, lean))
        if top is None:
            break
        best = climb(screen, space, top)
    return best


def bold_choice(model: BetModel, candidates: Iterable[Config], best: float, safe: float = 0.0) -> Config | None:
    """The candidate with the largest expected improvement on the best measured (chance to
    fit x corrected gain: an OOM costs a compile, not the best), if that is at least
    BOLD_GAIN of the best and more than the safe choice's (corrected throughput `safe`) gain."""
    pick, value = None, max(best * BOLD_GAIN, safe - best)
    for c in candidates:
        j = model.judge(c)
        if j is None:
            continue
        chance = j.chance
        gain = chance * (model.throughput(c) - best)
        if gain > value and chance >= MIN_FIT_CHANCE:
            pick, value = c, gain
    return pick


def losing_streak(measured, bets: set[Config]) -> int:
    """How many of the last bets in `measured` ((config, Measurement) in order) ran out of memory in a row."""
    streak = 0
    for config, m in measured:
        if config in bets and m.source != "estimate":
            streak = streak + 1 if m.failure == "oom" else 0 if m.failure is None else streak
    return streak
