"""Once a configuration fits, the next compile is one more likely to fit than not, when such
a candidate is worth a compile.

The expected gain (guide/gain.py) weighs a candidate's speed by its chance to fit, one compile
ahead. Over a budget of compiles that undervalues a fit: an out-of-memory compile gains
nothing and anchors nothing, where a fit is a new best to climb from. And a model of an IPU
nobody modelled is most wrong where it extrapolates: on the knob and region families' develop
draws, the picks it gave a chance under an even one fitted 23 % and 17 % of the time (a fifth
of its picks). So, as safe Bayesian optimisation evaluates only where the constraint holds at
a chosen confidence (Sui et al., "Safe exploration for optimization with Gaussian processes",
ICML 2015), the pick is among the candidates whose chance to fit is at least the one the guide
climbs the edge of memory at (its EDGE_CONFIDENCE, an even chance), while one of them is
expected to gain what the stopping rule deems worth a compile; only when none is does a bet
outside them remain.

What a fit is worth beyond its gain is bounded: the likely pick must be worth at least that
same confidence times the best bet's worth, so the rule values a fit at most 1/EDGE_CONFIDENCE
(twice) its one-step gain. Without the bound, on the region family's develop draws, studies
whose compiles settled at half the best known (BERT and ResNet-152, draw 50001) spent their
last compiles on single changes of their best (chance 1.00, gains of 1-10 % falling toward the
noise) while bets elsewhere were worth up to five times as much (on ResNet-152 the best known
itself, at a chance of 0.16-0.18).
"""

from __future__ import annotations

from ..problem import Config
from .corrected import CorrectedModel
from .stopping import STOP_GAIN


def likely_pick(
    model: CorrectedModel, worth: dict[Config, float], confidence: float
) -> Config | None:
    """The candidate of most `worth` among those whose chance to fit under `model` is at least
    `confidence`, if one is worth STOP_GAIN and at least `confidence` times the most any
    candidate is worth; else None."""
    likely = [c for c, w in worth.items() if w >= STOP_GAIN and model.chance(c) >= confidence]
    pick = max(likely, key=worth.__getitem__, default=None)
    if pick is None or worth[pick] < confidence * max(worth.values()):
        return None
    return pick
