"""How well the model foresaw each compile before it ran: the factor its spreads need.

The corrected model's spreads (guide/corrected.py) come from priors (a knob's, a region's,
widened by the study's misfit: guide/trust.py) and from the evidence of the compiles, which
can only say how much the configurations they measured differ from one another. On an IPU
nobody modelled, what was not measured can be off by more than either says. Each compile
tests that: before it ran, the model of the compiles before it gave its throughput and its
busiest tiles as a mean and a spread. Were those spreads right, the forecasts' errors in
spreads (z) would have unit variance (a prequential check: Dawid, "Statistical theory: the
prequential approach", 1984). So the spreads of what is still unmeasured are scaled by

    factor = sqrt((PRIOR_COMPILES + sum z^2) / (PRIOR_COMPILES + n)), at least 1

over the n forecasts (trust.misfit's inverse-gamma posterior, here on the model's own
errors, not the estimator's). Speed and memory each get theirs. A study whose compiles keep
landing outside the spreads the model gave them learns that the model is sure of too much,
and the regions it has not compiled become worth a compile; one whose compiles land where
forecast keeps the model's spreads. Never below 1: forecasts that came true in one region
say little of the others.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..problem import Config
from .corrected import CorrectedModel, Observation, Spreads
from .trust import PRIOR_COMPILES
from .warmstart import Screen

#: (the configs compiled before, the one forecast) -> its (speed z^2 or None, memory z^2 or None)
Forecasts = dict[tuple[tuple[Config, ...], Config], tuple[float | None, float | None]]


@dataclass(frozen=True)
class Errors:
    """A compile's forecast errors, in the forecast's spreads (squared)."""

    speed: float | None  # log throughput; None when it did not fit
    memory: float | None  # busiest tiles, the mean over its IPUs; None without a spread


def forecast_errors(
    model: CorrectedModel, observation: Observation, throughput: float | None
) -> Errors:
    """How far `observation` (a compile `model` had not seen) landed from `model`'s
    forecast, in the forecast's spreads."""
    config = observation.config
    speed = None
    judged = model.judge(config)
    if throughput and judged is not None and judged.throughput > 0:
        sd = math.hypot(model.speed_sd(config), model.speed_noise)
        speed = (math.log(throughput / judged.throughput) / sd) ** 2
    memory = None
    nominal = model.screen(config)
    if observation.tiles and nominal is not None and nominal.max_tile_bytes:
        tiles, _ = model.tiles(config, nominal)
        z2 = [
            ((point.measured - mu) / sd) ** 2
            for point, (mu, sd) in zip(observation.tiles, tiles, strict=False)
            if sd > 0
        ]
        memory = sum(z2) / len(z2) if z2 else None
    return Errors(speed, memory)


def spreads(
    screen: Screen,
    seen: Sequence[Observation],
    throughputs: dict[Config, float],
    headroom: float,
    cache: Forecasts | None = None,
) -> Spreads:
    """The factors on the corrected model's speed and memory spreads: each compile in `seen`
    (in the order measured) forecast by the model of those before it. `throughputs`: the
    measured throughput of each config that fit. `cache`: forecasts kept across calls (a
    study's next proposal adds one compile; its forecast is the last proposal's model's)."""
    cache = {} if cache is None else cache
    speed: list[float] = []
    memory: list[float] = []
    # the first compile's forecast is the estimator's own (trust.misfit judges that): from the
    # second, the forecasts of a model that learnt from compiles
    for k, observation in enumerate(seen):
        if k == 0:
            continue
        key = (tuple(o.config for o in seen[:k]), observation.config)
        if key not in cache:
            before = CorrectedModel(screen, list(seen[:k]), headroom)
            errors = forecast_errors(before, observation, throughputs.get(observation.config))
            cache[key] = (errors.speed, errors.memory)
        s, m = cache[key]
        if s is not None:
            speed.append(s)
        if m is not None:
            memory.append(m)
    return Spreads(_factor(speed), _factor(memory))


def _factor(z2: Sequence[float]) -> float:
    return max(1.0, math.sqrt((PRIOR_COMPILES + sum(z2)) / (PRIOR_COMPILES + len(z2))))


def measured_throughputs(measured: Sequence[Any]) -> dict[Config, float]:
    """Each compiled config that fit, and its measured throughput."""
    return {
        c: m.throughput
        for c, m in measured
        if m.source != "estimate" and m.feasible and m.failure is None and m.throughput
    }
