"""What one compile of a candidate may gain on the best measured, under the corrected model
(guide/corrected.py): its chance to fit, and its throughput as a log-normal around the
corrected figure with the model's speed spread (`CorrectedModel.speed_sd`).

Its expected improvement on the best is the guide's one rule for the next compile
(guide/guide.py), and, over the untried candidates, its stopping rule. While nothing has
fit, it is the expected throughput. An OOM gains nothing; it costs a compile.

The best is itself uncertain: a compile measures a config's speed with some scatter, which
the speed model learns (knob_effects: its noise). So the bar a candidate must clear is the
model's own figure for the best measured config (its posterior mean, not the lucky draw
that made it the best) raised by one learnt scatter (`bar`): a gain within the noise is
worth nothing, and two candidates whose figures differ by less than it are ranked by how
much of their spread lies beyond it (noisy expected improvement, in the manner of BoTorch's
qNoisyExpectedImprovement, with the incumbent plugged in).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import NormalDist

from ..problem import Config
from .corrected import CorrectedModel


def bar(model: CorrectedModel, fitting: Iterable[tuple[Config, float]]) -> float:
    """The throughput a compile must beat to gain: the model's best figure for the configs
    that were measured to fit (config, measured throughput; the measurement where the model
    does not judge the config), raised by the learnt scatter of a compile. 0 with none."""
    best = max(
        (
            (j.throughput if (j := model.judge(c)) is not None else measured)
            for c, measured in fitting
        ),
        default=0.0,
    )
    return best * math.exp(model.speed_noise)


def belief(model: CorrectedModel, config: Config) -> tuple[float, float, float] | None:
    """(chance to fit, corrected throughput, spread of its log) under the corrected model, or
    None when it cannot fit or run (rejected by the rules, no chance, no throughput). The
    base class's judge: a BetModel's re-scored judgement is not a belief."""
    j = CorrectedModel.judge(model, config)
    if j is None or j.chance <= 0.0 or j.throughput <= 0.0:
        return None
    return j.chance, j.throughput, max(model.speed_sd(config), 1e-6)


def expected_improvement(model: CorrectedModel, config: Config, best: float) -> float:
    """E[max(0, throughput - best)] were the config compiled, as a fraction of `best`: its
    chance to fit times the part of its (log-normal) speed spread above the best. With no best
    (nothing has fit), its expected throughput in samples/s."""
    if (b := belief(model, config)) is None:
        return 0.0
    chance, speed, sd = b
    if best <= 0.0:
        return chance * speed * math.exp(sd * sd / 2)
    d2 = (math.log(speed) - math.log(best)) / sd
    cdf = NormalDist().cdf
    return chance * (speed * math.exp(sd * sd / 2) * cdf(d2 + sd) - best * cdf(d2)) / best
