"""Replay: the Optuna parameters that reproduce a given Config (`wanted_params`, answered
by `Replay` when a warm start is enqueued or a config is projected into a space), and the
`Asker` that turns a space's knobs into `trial.suggest_*` calls while sampling.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Protocol

from ..errors import UsageError
from ..knob_spec import replay_params
from ..models import partition
from ..problem import Config
from ..profiles.model_profile import ModelProfile
from ..profiles.placement import checkpoints_every, optimum_checkpoints
from ..profiles.refine import split_grid
from .knobs import Choice, Knob, Range
from .names import readable


def checkpoint_spacing(profile: ModelProfile, config: Config) -> int | None:
    """The `every` with which checkpoints_every gives `config`'s checkpoints (0: none), or
    None when they are placed some other way (by hand)."""
    if config.checkpoints and tuple(config.checkpoints) == optimum_checkpoints(profile):
        return 1  # the optimum target's checkpoint_every = 1 (SearchSpace.sample)
    for every in range(0, len(profile.units) + 1):
        if checkpoints_every(profile, config.splits, every) == tuple(config.checkpoints):
            return every
    return None


def with_splits(
    profile: ModelProfile, config: Config, splits: tuple[str, ...], every: int | None
) -> Config:
    """`config` with its stages starting at `splits`, and its checkpoints re-derived for the new
    stages at `every` (its checkpoint_spacing; None or 0: left as they are, and so are the
    optimum target's, which no stage moves). A recomputing config's split cannot move without its
    checkpoints: kept where they were, the space drops it."""
    if not every or tuple(config.checkpoints) == optimum_checkpoints(profile):
        return config.replace(splits=splits)
    return config.replace(splits=splits, checkpoints=checkpoints_every(profile, splits, every))


def wanted_params(
    config: Config, profile: ModelProfile, candidates: list[int] | None = None
) -> dict[str, Any]:
    """`candidates`: the units stages may begin at, as SearchSpace._sample_splits draws them
    (--trainer optimum); a split elsewhere asks for the next candidate (nearest replay)."""
    c = config
    wanted: dict[str, Any] = replay_params(c)
    grid = profile if candidates is not None else split_grid(profile)  # as _sample_splits draws
    index = {u.path: i for i, u in enumerate(grid.units)}
    if c.splits and all(p in index for p in c.splits):
        cuts = [index[p] for p in c.splits]
        if candidates is not None:
            cuts = [bisect.bisect_left(candidates, i) + 1 for i in cuts]
        for i, r in enumerate(partition.encode(cuts)):
            wanted[f"split{i}_of_{c.ipus_per_replica}"] = r
    every = checkpoint_spacing(profile, c)
    if every is not None:
        wanted["checkpoint_every"] = every
    return {readable(k): v for k, v in wanted.items()}


class Suggests(Protocol):
    """What a search space asks of a trial: an Optuna trial, a Replay, a stand-in at random."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...
    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int: ...
    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float: ...


class Asker:
    """Turns knobs into trial.suggest_* calls; fixed knobs are not asked."""

    def __init__(self, trial: Suggests, knobs: dict[str, Knob]):
        self.trial = trial
        self.knobs = knobs

    def values(self, knob: str) -> list[Any]:
        k = self.knobs[knob]
        if isinstance(k, Range):
            raise UsageError(f"knob {knob} takes a list of choices, not a range")
        return list(k.values)

    def choose(self, param: str | None, options: list[Any]) -> Any:
        if not options:
            knob = (
                param.removesuffix("_fp32_weights").removesuffix("_pipelined")
                if param
                else "a knob"
            )
            raise UsageError(
                f"the search space leaves no valid value for {knob}: each of its choices breaks "
                'a rule for some candidates (e.g. recompute "pipeline" without a pipeline, '
                'loss_scaling "auto" with FP32 weights); add a choice to it in the --space file'
            )
        if len(options) == 1 or param is None:
            return options[0]
        return self.trial.suggest_categorical(readable(param), options)

    def integer(self, param: str, low: int, high: int, log: bool = False) -> int:
        if low == high:
            return low
        return self.trial.suggest_int(readable(param), low, high, log=log)

    def ask(self, knob: str, param: str | None = None) -> Any:
        param = param or knob
        k = self.knobs[knob]
        if isinstance(k, Choice):
            return self.choose(param, list(k.values))
        if k.integer:
            return self.trial.suggest_int(
                readable(param), int(k.low), int(k.high), log=k.log, step=int(k.step or 1)
            )
        value = self.trial.suggest_float(readable(param), k.low, k.high, log=k.log, step=k.step)
        return round(value, 6)  # a stepped float lands on 0.9000000000000001


class Replay:
    """A stand-in trial that answers with the wanted values, recording those in range."""

    def __init__(self, wanted: dict[str, Any], nearest: bool = False):
        self.wanted = wanted
        self.recorded: dict[str, Any] = {}
        self.nearest = nearest  # out of range: the nearest allowed value, not the lowest

    def _answer(self, name: str, domain: Knob, fallback: Any) -> Any:
        v = self.wanted.get(name)
        if v is not None and domain.contains(v):
            self.recorded[name] = v
            return v
        if (
            self.nearest
            and isinstance(domain, Range)
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
        ):
            step = domain.step or (1 if domain.integer else None)
            v = min(max(v, domain.low), domain.high)
            if step:
                v = domain.low + step * round((v - domain.low) / step)
                v = min(v, domain.high)
            return int(v) if domain.integer else round(v, 6)
        return fallback

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._answer(name, Choice(tuple(choices)), choices[0])

    def suggest_int(self, name: str, low: int, high: int, log: bool = False, step: int = 1) -> Any:
        return self._answer(name, Range(low, high, log, step if step != 1 else None, True), low)

    def suggest_float(
        self, name: str, low: float, high: float, log: bool = False, step: float | None = None
    ) -> Any:
        return self._answer(name, Range(low, high, log, step), low)
