"""How well the memory model foresaw each compile's tiles before it ran: the factor its
spreads need.

A candidate's chance to fit comes from the spread of its busiest tiles (guide/corrected.py):
the learnt memory parts' (guide/memory_model.py) and what they leave to each knob
(guide/knob_effects.py), from priors and the compiles' evidence. On an IPU nobody modelled a
region of the space can hold 40 % more of a memory category than anything compiled, and the
evidence of a few compiles cannot say so: picks the guide gave a chance of 0.5-0.8 fitted
45 % of the time on the region family. Each compile tests the spreads: before it ran, the
model of the compiles before it gave its busiest tiles as means and spreads. Were those
right, the forecasts' errors in spreads (z) would have unit variance (a prequential check:
Dawid, "Statistical theory: the prequential approach", 1984). So the spreads of tiles no
compile held are scaled by

    factor = sqrt((PRIOR_COMPILES + sum z^2) / (PRIOR_COMPILES + n)), at least 1

over the n forecasts (trust.misfit's inverse-gamma posterior, here on the memory model's own
errors). Never below 1: forecasts that came true in one region say little of the others.

Throughput is not scaled so: its forecasts' first errors are a knob's effect the model then
learns (the knob's spread is fitted to the compiles: guide/knob_effects.py), and scaling every
spread by them made the guide overshoot a peak it had just found (tests/
test_guide_knob_effects.py), with no gain on the region family's searches.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..problem import Config
from .corrected import CorrectedModel, Observation
from .trust import excess
from .warmstart import Screen

#: (the configs compiled before, the one forecast) -> its tiles' mean z^2 (None: no spread)
Forecasts = dict[tuple[tuple[Config, ...], Config], float | None]


def forecast_error(model: CorrectedModel, observation: Observation) -> float | None:
    """How far `observation`'s busiest tiles (a compile `model` had not seen) landed from
    `model`'s forecast, in the forecast's spreads: the mean z^2 over its IPUs (None where the
    forecast had no spread, a compile of the very tiles of another)."""
    nominal = model.screen(observation.config)
    if not observation.tiles or nominal is None or not nominal.max_tile_bytes:
        return None
    tiles, _ = model.tiles(observation.config, nominal)
    z2 = [
        ((point.measured - mu) / sd) ** 2
        for point, (mu, sd) in zip(observation.tiles, tiles, strict=False)
        if sd > 0
    ]
    return sum(z2) / len(z2) if z2 else None


def memory_factor(
    screen: Screen, seen: Sequence[Observation], headroom: float, cache: Forecasts | None = None
) -> float:
    """The factor on the corrected model's memory spreads: each compile in `seen` (in the
    order measured) forecast by the model of those before it. `cache`: forecasts kept across
    calls (a study's next proposal adds one compile; its forecast is the last one's model's)."""
    cache = {} if cache is None else cache
    errors = []
    # before the first compile there is no learnt memory to forecast with (the headroom rule)
    for k, observation in enumerate(seen):
        if k == 0:
            continue
        key = (tuple(o.config for o in seen[:k]), observation.config)
        if key not in cache:
            cache[key] = forecast_error(
                CorrectedModel(screen, list(seen[:k]), headroom), observation
            )
        if (error := cache[key]) is not None:
            errors.append(error)
    return excess(errors)
