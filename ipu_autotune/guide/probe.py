"""The model a layout probe climbs on (guide/proposals.Guide._probe): the chance to beat the
best measured by a margin, not expected throughput. A candidate that fits for sure but cannot
win teaches nothing."""

from __future__ import annotations

import math
from dataclasses import replace

from ..problem import Config
from .bold import LONG_SHOT, BetModel
from .corrected import CorrectedModel, Judgement
from .gain import chance_to_beat


class ProbeModel(BetModel):
    """A BetModel scored by the chance to beat exp(`log_target`) (`chance_to_beat`) times that
    target, so that the score is in samples/s, as a throughput is."""

    def __init__(self, screen, observations, log_target: float):
        super().__init__(screen, observations)
        self.log_target = log_target

    def judge(self, config: Config) -> Judgement | None:
        """Counts with a LONG_SHOT to fit; worth its chance to beat the target, in samples/s."""
        if config not in self.bets:
            j = CorrectedModel.judge(self, config)
            beat = chance_to_beat(self, config, self.log_target)
            self.bets[config] = None if j is None else replace(
                j, fits=j.chance >= LONG_SHOT, worth=beat * math.exp(self.log_target))
        return self.bets[config]
