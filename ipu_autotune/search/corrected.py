"""The estimator corrected by the compiles so far, config by config.

The analytical model is off for a real IPU by some tens of percent, and not by one constant:
its tile imbalance differs per kind of op, the host and per-step costs differ, so the error
of a pipelined FP16 config is not that of a sharded FP32 one. Each compile tells us the
error where it ran: measured / estimated busiest tile (even an out-of-memory compile reports
it) and measured / estimated throughput. For a candidate, the correction is a kernel-weighted
mean of those errors, weighted by how many knobs it shares with each compiled config (a
config one knob away is mostly like it), shrunk towards a prior: for memory the largest
ratio seen (conservative: an OOM costs a compile), for throughput the mean log-ratio. The
feasibility margin shrinks from `headroom` far from any compile to a fifth of it at one.
With compiles running in parallel, each further proposal adds a `hedge` to that margin, so
the first round of N workers tries the estimator's best at N levels of memory safety.

Only the estimator's outputs (busiest tile per IPU, throughput) and Config's fields are
used, so the correction survives changes to the estimator's constants and structure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from ..backends.base import Measurement
from ..problem import Config
from ..warmstart import Screen

#: weight of a compiled config that differs from the candidate in one knob (d knobs: KERNEL**d)
KERNEL = 0.3
#: weight of the prior against the compiled configs
PRIOR_WEIGHT = 0.25
_FIELDS = [f.name for f in fields(Config)]


def distance(a: Config, b: Config) -> int:
    """How many knobs differ."""
    return sum(getattr(a, f) != getattr(b, f) for f in _FIELDS)


@dataclass(frozen=True)
class Observation:
    config: Config
    memory_ratio: float | None  # measured / estimated busiest tile (worst IPU)
    speed_log_ratio: float | None  # log(measured / estimated throughput), when it ran


def observe(screen: Screen, measured: Sequence) -> list[Observation]:
    """What each compiled trial says about the estimator's error (estimates say nothing)."""
    out = []
    for config, m in measured:
        if m.source == "estimate" or m.failure not in (None, "oom"):
            continue
        predicted = screen(config)
        if predicted is None:
            continue
        ratios = [got / want for got, want in zip(m.max_tile_bytes, predicted.max_tile_bytes) if want > 0]
        speed = None
        if m.feasible and m.throughput and predicted.throughput:
            speed = math.log(m.throughput / predicted.throughput)
        out.append(Observation(config, max(ratios) if ratios else None, speed))
    return out


class CorrectedModel:
    """Estimates (via a nominal `Screen`, cached) times the learnt, per-config corrections."""

    def __init__(self, screen: Screen, observations: list[Observation], headroom: float, hedge: float = 0.0):
        """`hedge`: extra memory margin where nothing was compiled near (scaled like the
        headroom): parallel workers proposing while others' compiles run spread their bets."""
        self.screen, self.headroom, self.hedge = screen, headroom, hedge
        self.memory = [(o.config, o.memory_ratio) for o in observations if o.memory_ratio is not None]
        self.speed = [(o.config, o.speed_log_ratio) for o in observations if o.speed_log_ratio is not None]
        self.memory_prior = max([1.0, *(r for _, r in self.memory)])
        self.speed_prior = sum(r for _, r in self.speed) / len(self.speed) if self.speed else 0.0
        self.cache: dict[Config, tuple | None] = {}

    @staticmethod
    def _blend(config: Config, points: list, prior: float) -> tuple[float, float]:
        """(kernel-weighted value, weight of the prior in it: 1 far from every point)."""
        num, den = prior * PRIOR_WEIGHT, PRIOR_WEIGHT
        for c, value in points:
            w = KERNEL ** distance(config, c)
            num, den = num + w * value, den + w
        return num / den, PRIOR_WEIGHT / den

    def judge(self, config: Config) -> tuple | None:
        """(fits, corrected throughput, corrected worst-tile fraction of the limit) or None
        when the rules reject it."""
        if config in self.cache:
            return self.cache[config]
        m = self.screen(config)
        if m is None or not m.max_tile_bytes:
            self.cache[config] = None
            return None
        ratio, unsure = self._blend(config, self.memory, self.memory_prior)
        log_speed, _ = self._blend(config, self.speed, self.speed_prior)
        limit = m.tile_capacity_bytes * (1.0 - (self.headroom + self.hedge) * unsure)
        load = max(m.max_tile_bytes) * ratio / limit
        out = (load <= 1.0, (m.throughput or 0.0) * math.exp(log_speed), load)
        self.cache[config] = out
        return out

    def score(self, config: Config) -> tuple:
        """Fits first, then corrected throughput; what does not fit, by how far over."""
        j = self.judge(config)
        if j is None:
            return (0, float("-inf"))
        return (1, j[1]) if j[0] else (0, -j[2])


class CorrectedScreen(Screen):
    """A warmstart.Screen whose answers are corrected (so warmstart.climb climbs the corrected model)."""

    def __init__(self, model: CorrectedModel):
        s = model.screen
        super().__init__(s.problem, s.profile, s.constants, 0.0, s.prepare)
        self.model = model

    def __call__(self, config: Config) -> Measurement | None:
        if config not in self.cache:
            j, m = self.model.judge(config), self.model.screen(config)
            self.cache[config] = None if j is None else replace(
                m, feasible=j[0], throughput=j[1], headroom=0.0, failure=None if j[0] else "oom",
                max_tile_bytes=[int(j[2] * m.tile_capacity_bytes)] if m.tile_capacity_bytes else m.max_tile_bytes)
        return self.cache[config]
