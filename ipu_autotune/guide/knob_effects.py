"""What the estimator gets wrong about each knob, learnt from the compiles: an additive
Gaussian process over the knobs.

A residual (log time measured over predicted, or a busiest tile's excess over the learnt
memory parts) is modelled as a sum of one smooth term per knob (a slope and a Matérn 5/2
over the knob's coordinates, guide/features.py; a level per word or switch), a constant, and
one term over all knobs at once for the interactions the sum cannot express:

    r(x) = c + sum_k f_k(x_k) + g(x),   f_k ~ GP(0, s^2 (m52(|x_k - x'_k| / l) + (x_k - 1/2)(x'_k - 1/2))),
                                         g ~ GP(0, s_i^2 m52(|x - x'| / l)).

The slope lets a trend the compiles show along a knob carry past the values they tried.

With the estimator as the prior mean (r = 0), a knob no compile has moved keeps its prior
spread s: a candidate one knob away from a compiled config is unsure by about s, one five
knobs away by about s * sqrt(5). A knob the compiles moved is learnt as a function of its
value: an effect that peaks mid-range is seen as such after a few compiles on either side,
wherever the other knobs were. The spreads are chosen by the compiles' evidence (the
marginal likelihood over a small grid), so a residual the compiles show to be small shrinks
every knob's spread, and a large one widens it. Optuna's GPSampler (optuna/_gp) is the
model's anchor (Matérn 5/2, evidence-fitted kernel); ours adds the estimator as the mean and
an additive structure, which learns one knob's effect from compiles that moved others too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import product

import numpy as np

#: the grid the kernel's spreads are chosen on, by evidence; `spreads` x unit of the residual
SPREADS = (0.25, 0.5, 1.0, 2.0)
INTERACTION = (0.0, 0.5, 1.0)  # the interaction term's spread, relative to a knob's
#: a knob's length scale on its coordinates (about [0, 1] each): non-monotone effects allowed
LENGTH = 0.3
_SQRT5 = math.sqrt(5.0)


def _m52(r: np.ndarray) -> np.ndarray:
    s = _SQRT5 * r
    return (1.0 + s + s * s / 3.0) * np.exp(-s)


class KnobEffects:
    """A residual as a function of the knobs: posterior mean and spread at any configuration.

    `groups`: per knob, the columns of its numeric coordinates; `levels`: the level columns;
    `unit`: the residual's typical size (a knob's prior spread at SPREADS' 1.0); `noise`: a
    compile's own scatter around the model (run-to-run jitter)."""

    def __init__(self, numeric: np.ndarray, levels: np.ndarray, y: Sequence[float],
                 groups: Sequence[Sequence[int]], unit: float, noise: float):
        self.groups = [list(g) for g in groups]
        # each knob's coordinates averaged (a knob's distance is their RMS: guide/features.py)
        self._mean = np.zeros((numeric.shape[1], len(self.groups)))
        for j, g in enumerate(self.groups):
            self._mean[g, j] = 1.0 / len(g)
        self.numeric, self.levels = numeric, levels
        self.y = np.asarray(y, dtype=float)
        self.unit, self.noise = unit, noise
        self.n_terms = len(self.groups) + levels.shape[1]
        self.knob, self.interaction = unit, 0.0
        self._fit()

    # --- the kernel ------------------------------------------------------------------------

    def _parts(self, num_a, lvl_a, num_b, lvl_b) -> tuple[np.ndarray, np.ndarray]:
        """(sum over knobs of each knob's kernel at unit spread, the interaction kernel)."""
        d2 = ((num_a[:, None, :] - num_b[None, :, :]) ** 2) @ self._mean / LENGTH**2  # per knob
        slopes = ((num_a[:, None, :] - 0.5) * (num_b[None, :, :] - 0.5)) @ self._mean
        total = (_m52(np.sqrt(d2)) + slopes).sum(-1)
        squared = d2.sum(-1)
        if lvl_a.shape[1]:
            same = lvl_a[:, None, :] == lvl_b[None, :, :]
            total += same.sum(-1)
            squared += (~same).sum(-1) / LENGTH**2
        return total, _m52(np.sqrt(squared))

    def _kernel(self, parts, knob: float, interaction: float) -> np.ndarray:
        main, inter = parts
        return knob**2 * (1.0 + main) + interaction**2 * inter  # the 1: the constant term

    def _prior_variance(self, numeric: np.ndarray, knob: float, interaction: float) -> np.ndarray:
        """k(x, x) at each row: the slopes make it grow away from a knob's middle."""
        slopes = (((numeric - 0.5) ** 2) @ self._mean).sum(-1)
        return knob**2 * (1.0 + self.n_terms + slopes) + interaction**2 + np.zeros(len(numeric))

    # --- fit and predict -------------------------------------------------------------------

    def _fit(self) -> None:
        n = len(self.y)
        self._alpha = self._chol = None
        if n == 0:
            return
        parts = self._parts(self.numeric, self.levels, self.numeric, self.levels)
        best = None
        for scale, rel in product(SPREADS, INTERACTION):
            knob = scale * self.unit
            k = self._kernel(parts, knob, rel * knob) + (self.noise**2 + 1e-10) * np.eye(n)
            try:
                chol = np.linalg.cholesky(k)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, self.y))
            evidence = -0.5 * self.y @ alpha - np.log(np.diag(chol)).sum()
            if best is None or evidence > best[0]:
                best = (evidence, knob, rel * knob, chol, alpha)
        if best is not None:
            _, self.knob, self.interaction, self._chol, self._alpha = best

    def predict(self, numeric: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the residual at each row."""
        prior = self._prior_variance(numeric, self.knob, self.interaction)
        if self._alpha is None:
            return np.zeros(len(numeric)), np.sqrt(prior)
        k = self._kernel(self._parts(numeric, levels, self.numeric, self.levels), self.knob, self.interaction)
        mean = k @ self._alpha
        v = np.linalg.solve(self._chol, k.T)
        var = np.maximum(prior - (v * v).sum(0), 1e-12)
        return mean, np.sqrt(var)

    def correlation(self, num_a, lvl_a, num_b, lvl_b) -> np.ndarray:
        """Prior correlation of the residuals at each row of a with each row of b: how much of
        one's outcome is the other's."""
        k = self._kernel(self._parts(num_a, lvl_a, num_b, lvl_b), self.knob, self.interaction)
        va = self._prior_variance(num_a, self.knob, self.interaction)
        vb = self._prior_variance(num_b, self.knob, self.interaction)
        return k / np.sqrt(va[:, None] * vb[None, :])


class Residuals:
    """KnobEffects over configurations: rows of (config, level, residual), where `level` is
    an extra level of the row (an IPU's place, for memory) or None; `memory` keeps only the
    knobs that change what the tiles hold (a host knob cannot change a tile)."""

    def __init__(self, featurizer, rows: Sequence[tuple], unit: float, noise: float, memory: bool = False):
        self.featurizer = featurizer
        numeric_mask, level_mask = featurizer.coordinates.memory_mask() if memory else (None, None)
        names = featurizer.coordinates.numeric
        keep = [i for i in range(len(names)) if numeric_mask is None or numeric_mask[i]]
        self._num_cols = keep
        self._lvl_cols = [i for i in range(len(featurizer.coordinates.levels)) if level_mask is None or level_mask[i]]
        by_knob: dict[str, list[int]] = {}
        for j, i in enumerate(keep):
            by_knob.setdefault(names[i].split("[")[0], []).append(j)
        self._extra = any(level is not None for _, level, _ in rows)
        num, lvl = self._arrays([(c, level) for c, level, _ in rows])
        self.effects = KnobEffects(num, lvl, [y for _, _, y in rows], list(by_knob.values()), unit, noise)
        self._cache: dict[tuple, tuple[float, float]] = {}

    def _arrays(self, items: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray]:
        nums, lvls = [], []
        for config, level in items:
            num, lvl = self.featurizer(config)
            nums.append([num[i] for i in self._num_cols])
            lvls.append([lvl[i] for i in self._lvl_cols] + ([level] if self._extra else []))
        width = len(self._lvl_cols) + (1 if self._extra else 0)
        return (np.asarray(nums, dtype=float).reshape(len(items), len(self._num_cols)),
                np.asarray(lvls, dtype=object).reshape(len(items), width))

    def correlation(self, config, others: Sequence) -> list[float]:
        """Prior correlation of the residual at `config` with that at each of `others`."""
        if not others:
            return []
        a = self._arrays([(config, None)])
        b = self._arrays([(c, None) for c in others])
        return [float(x) for x in self.effects.correlation(*a, *b)[0]]

    def __call__(self, config, level=None) -> tuple[float, float]:
        """(mean, spread) of the residual at `config` (and `level`)."""
        return self.at_levels(config, (level,))[0]

    def at_levels(self, config, levels: Sequence) -> list[tuple[float, float]]:
        """(mean, spread) of the residual at `config` with each of `levels` (one prediction)."""
        key = (config, tuple(levels))
        got = self._cache.get(key)
        if got is None:
            if len(self._cache) > 100_000:  # bounded, as the Featurizer's
                self._cache.clear()
            mean, sd = self.effects.predict(*self._arrays([(config, level) for level in levels]))
            got = self._cache[key] = [(float(m), float(s)) for m, s in zip(mean, sd)]
        return got
