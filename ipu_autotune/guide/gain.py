"""What one compile of a candidate may gain on the best measured, under the corrected model
(guide/corrected.py): its chance to fit, and its throughput as a log-normal around the
corrected figure with the model's speed spread (`CorrectedModel.speed_sd`).

Two views of the same belief: the chance to beat a target (a probe's and, over all the
candidates, the stopping rule's question, guide/proposals.py) and the expected improvement
on the best (which compile to spend when no safe choice is expected to pay, or while nothing
has fit). An OOM gains nothing; it costs a compile.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from ..problem import Config
from .corrected import CorrectedModel, layout


def belief(model: CorrectedModel, config: Config) -> tuple[float, float, float] | None:
    """(chance to fit, corrected throughput, spread of its log) under the corrected model, or
    None when it cannot fit or run (rejected by the rules, no chance, no throughput). The
    base class's judge: a BetModel's or ProbeModel's re-scored judgement is not a belief."""
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


def chance_to_beat(model: CorrectedModel, config: Config, log_target: float) -> float:
    """P(the config fits and its throughput exceeds exp(log_target)) under the corrected model."""
    if (b := belief(model, config)) is None:
        return 0.0
    chance, speed, sd = b
    return chance * NormalDist().cdf((math.log(speed) - log_target) / sd)


def beat_chance(model: CorrectedModel, candidates, best: float, beat: float) -> float:
    """The chance that some candidate fits and is more than `beat` (a fraction) faster than
    `best`: the stopping rule's question. Per candidate: its chance to fit x P(its throughput
    > (1 + beat) best) under the model's speed spread. The errors of one IPU layout's
    candidates move together (they share the learnt factors and residuals): per layout its
    likeliest candidate counts, and the layouts are taken as independent."""
    target = math.log(best * (1.0 + beat))
    per_layout: dict = {}
    for c in candidates:
        p = chance_to_beat(model, c, target)
        key = layout(c)
        per_layout[key] = max(per_layout.get(key, 0.0), p)
    return 1.0 - math.prod(1.0 - p for p in per_layout.values())
