"""Whether a Config lies in a study's space, and the nearest one that does.

The space is what its sampler can produce, so membership is decided by the sampler itself:
replay the config's own values through `SearchSpace.sample` (over the full domain, before
advice narrowed it) and compare. A knob whose value the replay cannot reproduce is outside.
Knobs set by advice (`SearchSpace.advised`) take any value: the user left them free.
"""

from __future__ import annotations

from dataclasses import fields

from ..models.trace import ModelProfile
from ..problem import Config, Problem


def _replayed(space, problem: Problem, profile: ModelProfile, config: Config, nearest: bool) -> Config:
    from .space import SearchSpace, _Replay, wanted_params

    full = SearchSpace(space.domain, space.sources, space.user_knobs)
    return full.sample(_Replay(wanted_params(config, profile), nearest=nearest), problem, profile)


def outside(space, problem: Problem, profile: ModelProfile, config: Config) -> list[str]:
    replayed = _replayed(space, problem, profile, config, nearest=False)
    return [f.name for f in fields(Config)
            if f.name not in space.advised and getattr(config, f.name) != getattr(replayed, f.name)]


def project(space, problem: Problem, profile: ModelProfile, config: Config) -> Config:
    replayed = _replayed(space, problem, profile, config, nearest=True)
    kept = {name: getattr(config, name) for name in space.advised}
    return replayed.replace(**kept) if kept else replayed
