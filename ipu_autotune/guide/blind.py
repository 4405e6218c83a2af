"""The first round's bets, before any compile has returned: each is the candidate that adds
most to the round's expected best throughput.

Before a compile, how much the IPU holds beyond the estimate is unknown, and shared: a
candidate's busiest tile is its estimate times exp(g + l), g common to every candidate and l
to one IPU layout's; a layout's speed is off by exp(s). Four bets that all sit at 0.85 of a
tile in one layout all run out together where g is large; a slower layout's candidate at 0.75
still fits there. The round's value is the mean, over draws of (g, l, s), of the fastest bet
that fits.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable

#: spread of log(measured / estimated busiest tile) shared by every candidate, and per IPU layout
SHARED_SD, LAYOUT_SD = math.hypot(0.25, 0.10), 0.07
#: spread of log(measured / estimated throughput) per IPU layout (corrected.SPEED_SPREAD)
SPEED_SD = 0.10
DRAWS = 256


class BlindRound:
    """Draws of the unknowns (fixed seed: the same round in every process)."""

    def __init__(self, draws: int = DRAWS):
        rng = random.Random(20261127)
        self.shared = [rng.gauss(0.0, SHARED_SD) for _ in range(draws)]
        self._rng = rng
        self._layouts: dict[Hashable, list[tuple[float, float]]] = {}

    def _layout(self, key: Hashable) -> list[tuple[float, float]]:
        if key not in self._layouts:
            self._layouts[key] = [
                (self._rng.gauss(0.0, LAYOUT_SD), self._rng.gauss(0.0, SPEED_SD))
                for _ in self.shared
            ]
        return self._layouts[key]

    def outcomes(self, key: Hashable, load: float, speed: float) -> list[float]:
        """Per draw, the bet's throughput if it fits, else 0 (`load`: estimated busiest tile / a
        tile)."""
        # _layout draws a (layout, speed) pair per shared draw: equal lengths
        return [
            speed * math.exp(s) if load * math.exp(g + g_layout) <= 1.0 else 0.0
            for g, (g_layout, s) in zip(self.shared, self._layout(key), strict=True)
        ]

    @staticmethod
    def worth(outcomes: list[list[float]]) -> float:
        """The round's expected best: the mean over draws of its fastest bet that fits."""
        if not outcomes:
            return 0.0
        # one round's outcomes (every caller's): a value per draw each
        return float(sum(max(column) for column in zip(*outcomes, strict=True)) / len(outcomes[0]))
