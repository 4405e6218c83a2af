"""The knob-effect model (guide/knob_effects.py) over configurations: each row a config,
turned into the model's coordinates by a Featurizer (guide/features.py), with its residual.

A proposal builds several corrected models on the same compiles, so each set of rows is
fitted once (a bounded cache)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..problem import Config
from .features import GROUPS as GROUP_NAMES, Featurizer
from .knob_effects import LOG_SPREAD_SD, OWN, KnobEffects
from .prior import KnobRow

_FITTED: dict[tuple[Any, ...], KnobEffects] = {}  # one fit per set of rows


class Residuals:
    """KnobEffects over configurations: rows of (config, level, residual), where `level` is
    an extra level of the row (an IPU's place, for memory) or None; `memory` keeps only the
    knobs that change what the tiles hold (a host knob cannot change a tile). `foreign`:
    other studies' rows (guide/prior.KnobRow), each of its own study."""

    def __init__(
        self,
        featurizer: Featurizer,
        rows: Sequence[tuple[Any, ...]],
        unit: float,
        noise: float,
        memory: bool = False,
        log_spread_sd: float = LOG_SPREAD_SD,
        foreign: Sequence[KnobRow] = (),
        learn_noise: bool = False,
        group_unit: float | None = None,
        widen: float = 1.0,
    ):
        self.featurizer = featurizer
        numeric_mask, level_mask = featurizer.coordinates.memory_mask() if memory else (None, None)
        names = featurizer.coordinates.numeric
        keep = [i for i in range(len(names)) if numeric_mask is None or numeric_mask[i]]
        self._num_cols = keep
        self._lvl_cols = [
            i
            for i in range(len(featurizer.coordinates.levels))
            if level_mask is None or level_mask[i]
        ]
        by_knob: dict[str, list[int]] = {}
        for j, i in enumerate(keep):
            by_knob.setdefault(names[i].split("[")[0], []).append(j)
        self._extra = any(level is not None for _, level, _ in rows) or any(
            r.level is not None for r in foreign
        )
        self._studies = bool(foreign)
        # a proposal builds several models on the same compiles: each fit is made once
        key = (
            id(featurizer),
            memory,
            unit,
            noise,
            log_spread_sd,
            learn_noise,
            group_unit,
            widen,
            tuple(rows),
            tuple(foreign),
        )
        effects = _FITTED.get(key)
        if effects is None:
            num, lvl = self._arrays(
                [(c, level) for c, level, _ in rows]
                + [(r.config, r.level, r.split_at, r.study) for r in foreign]
            )
            effects = KnobEffects(
                num,
                lvl,
                [y for _, _, y in rows] + [r.residual for r in foreign],
                list(by_knob.values()),
                unit,
                noise,
                log_spread_sd,
                outputs=self._extra,
                studies=self._studies,
                learn_noise=learn_noise,
                group_levels=[
                    j
                    for j, i in enumerate(self._lvl_cols)
                    if featurizer.coordinates.levels[i] in GROUP_NAMES
                ],
                group_unit=group_unit,
                widen=widen,
            )
            if len(_FITTED) > 256:  # bounded: a long study must not grow it forever
                _FITTED.clear()
            _FITTED[key] = effects
        self.effects = effects
        self._cache: dict[tuple[Any, ...], list[tuple[float, float]]] = {}

    def _arrays(self, items: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, np.ndarray]:
        """Rows of (config, level), this study's, or (config, level, split_at, study),
        another's."""
        nums, lvls = [], []
        for config, level, *elsewhere in items:
            num, lvl = (
                self.featurizer.foreign(config, elsewhere[0])
                if elsewhere
                else self.featurizer(config)
            )
            nums.append([num[i] for i in self._num_cols])
            lvls.append(
                [lvl[i] for i in self._lvl_cols]
                + ([level] if self._extra else [])
                + ([elsewhere[1] if elsewhere else OWN] if self._studies else [])
            )
        width = len(self._lvl_cols) + (1 if self._extra else 0) + (1 if self._studies else 0)
        return (
            np.asarray(nums, dtype=float).reshape(len(items), len(self._num_cols)),
            np.asarray(lvls, dtype=object).reshape(len(items), width),
        )

    def correlation(self, config: Config, others: Sequence[Config]) -> list[float]:
        """Prior correlation of the residual at `config` with that at each of `others`."""
        if not others:
            return []
        a = self._arrays([(config, None)])
        b = self._arrays([(c, None) for c in others])
        return [float(x) for x in self.effects.correlation(*a, *b)[0]]

    def covariance(self, configs: Sequence[Config], others: Sequence[Config]) -> np.ndarray:
        """Posterior covariance of the residual at each of `configs` with each of `others`."""
        a = self._arrays([(c, None) for c in configs])
        b = self._arrays([(c, None) for c in others])
        return self.effects.covariance(*a, *b)

    def __call__(self, config: Config, level: object = None) -> tuple[float, float]:
        """(mean, spread) of the residual at `config` (and `level`)."""
        return self.at_levels(config, (level,))[0]

    def prefetch(self, items: Iterable[tuple[Config, Sequence[object]]]) -> None:
        """Predict many (config, levels) in one call, into the cache `at_levels` reads: a climb
        judges a round's candidates one by one, and one prediction of them all costs about
        what one of them does (numpy's overhead per call is most of a row's cost)."""
        todo = [
            key
            for key in dict.fromkeys((c, tuple(levels)) for c, levels in items)
            if key not in self._cache
        ]
        if len(todo) > 1:
            self._predict(todo)

    def at_levels(self, config: Config, levels: Sequence[object]) -> list[tuple[float, float]]:
        """(mean, spread) of the residual at `config` with each of `levels` (one prediction)."""
        key = (config, tuple(levels))
        got = self._cache.get(key)
        if got is None:
            self._predict([key])
            got = self._cache[key]
        return got

    def _predict(self, keys: list[tuple[Config, tuple[Any, ...]]]) -> None:
        """One prediction of every (config, levels) in `keys`, a row per level, into the cache."""
        if len(self._cache) + len(keys) > 100_000:  # bounded, as the Featurizer's
            self._cache.clear()
        # predict: a mean and a spread per row
        mean, sd = self.effects.predict(
            *self._arrays([(c, level) for c, levels in keys for level in levels])
        )
        row = 0
        for key in keys:
            n = len(key[1])
            self._cache[key] = [
                (float(m), float(s))
                for m, s in zip(mean[row : row + n], sd[row : row + n], strict=True)
            ]
            row += n
