"""What the estimator gets wrong about each knob, learnt from the compiles: an additive
Gaussian process over the knobs, with a spread of its own for every knob.

A residual (log time measured over predicted, or a busiest tile's excess over the learnt
memory parts) is modelled as a sum of one smooth term per knob (a slope and a Matérn 5/2
over the knob's coordinates, guide/features.py; a level per word or switch), a constant, and
the interactions of every two and every three knobs:

    r(x) = c + sum_k f_k(x_k) + g_2(x) + g_3(x),
    f_k ~ GP(0, s_k^2 (k_k(x_k, x'_k) + (x_k - 1/2)(x'_k - 1/2))),
        k_k = m52(|x_k - x'_k| / l) or [x_k = x'_k],
    g_d ~ GP(0, s_d^2 e_d(k_1 .. k_K) / C(K, d)),
        e_d: the sum over every d knobs of their kernels' product.

Two configs that share a pair (a triple) of knob values share its effect, whatever their
other knobs: on an IPU nobody modelled a combination of two or three knob values can be off
as a whole, and one compile in it teaches every config in it.

The slope lets a trend the compiles show along a knob carry past the values they tried.
Groups of structural choices (a layout; it with its precision, optimizer and recomputation:
features.GROUPS) are levels of their own, each a term with a spread of its own: the
estimator's errors differ most between such regions, so a region no compile reached is as
unsure as the estimator's error between configurations (guide/trust.py), and one compile in a
region teaches all of it. Every term but the constant (each knob's, the groups' and the
interactions') starts wider on an IPU the compiles show far off the estimator (`widen`: the
study's misfit; narrower where a calibration store showed the estimator right on this IPU),
so a knob no compile moved is as unsure as the estimator is here. With
`learn_noise`, a compile's own scatter is fitted too, as a spread with its own prior.

With the estimator as the prior mean (r = 0), every knob starts with the same prior spread,
and each s_k is set by the compiles' evidence (the posterior mode of the marginal
likelihood times a log-normal prior on each s_k, by gradient ascent): a knob whose moves
changed the residual widens, one whose moves did not narrows, and a knob no compile has
moved keeps its prior spread, however small the others turn out. So a candidate one
unexplored knob (or IPU layout) away from the compiles stays unsure by that knob's prior,
and is worth a compile when it could beat the best. Optuna's GPSampler (optuna/_gp) is the
model's anchor (Matérn 5/2, a hyperparameter per dimension, MAP-fitted with a prior); ours
adds the estimator as the mean and an additive structure, which learns one knob's effect
from compiles that moved others too.

Other studies' compiles (the calibration store's, guide/prior.py) are rows of their own
study: a residual of study s and one of study s' share the knobs' effects by a correlation
rho (k((x, s), (x', s')) = k(x, x') (rho + (1 - rho) [s = s'])), itself set by the evidence
with the spreads. Studies whose compiles agree on a knob's effect raise rho, and a new study
starts from that effect; studies that disagree lower it, and the new study's own compiles
decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: a knob's length scale on its coordinates (about [0, 1] each): non-monotone effects allowed
LENGTH = 0.3
#: the log-normal prior on each spread: median `unit` (the interactions': `group_unit`, or half the
#: unit),
#: and by default this standard deviation of its log (a knob may matter ten times more, or less)
LOG_SPREAD_SD = 1.0
#: with learnt noise, the standard deviation of its log around the given noise
NOISE_SD = 0.5
#: with outputs (memory: one per IPU of a config), how much of one IPU's residual is another's
#: of the same config: k((x, i), (x', j)) = k(x, x') (OUTPUT_CORRELATION + (1 - it) [i = j])
OUTPUT_CORRELATION = 0.5
#: other studies' rows (guide/prior.py): the prior of the logit of their correlation with this
#: study's, centred at an even share (rho 1/2) and wide (a store's studies may share nearly
#: every effect or almost none)
STUDY_LOGIT_SD = 1.5
#: this study's own rows and candidates, in the study column
OWN = ""
#: the evidence's ascent: steps and their size in log spread
STEPS, RATE = 80, 0.1
#: the interaction terms: of every two knobs, and of every three (issue 58: on an IPU nobody
#: modelled, a combination of two or three knob values is off as a whole)
ORDERS = 2
_SQRT5 = math.sqrt(5.0)


def _rho(logit: float) -> float:
    return 1.0 / (1.0 + math.exp(-logit))


def _shared(rho: float, across: np.ndarray) -> np.ndarray:
    """Per pair of rows, the share of the kernel their studies have in common: 1 within a
    study, rho across studies."""
    return 1.0 - (1.0 - rho) * across


def _interactions(base: np.ndarray) -> list[np.ndarray]:
    """The additive kernels of order 2 and 3 over per-knob kernels `base` (..., knobs), each
    at 1 where two configs are equal: the sum over every pair (triple) of knobs of their
    kernels' product, over the number of pairs (triples). Two configs that share a pair of
    knob values share that pair's effect, whatever the other knobs (Duvenaud, Nickisch and
    Rasmussen, "Additive Gaussian processes", 2011: the elementary symmetric polynomials by
    Newton's identities)."""
    n = base.shape[-1]
    p1, p2, p3 = base.sum(-1), (base**2).sum(-1), (base**3).sum(-1)
    e2 = (p1 * p1 - p2) / 2 / max(math.comb(n, 2), 1)
    e3 = (p1**3 - 3 * p1 * p2 + 2 * p3) / 6 / max(math.comb(n, 3), 1)
    return [e2[..., None], e3[..., None]]


def _m52(r: np.ndarray) -> np.ndarray:
    s = _SQRT5 * r
    return (1.0 + s + s * s / 3.0) * np.exp(-s)


class KnobEffects:
    """A residual as a function of the knobs: posterior mean and spread at any configuration.

    `groups`: per knob, the columns of its numeric coordinates; `levels`: the level columns
    (one knob each); `unit`: a knob's prior spread (median); `noise`: a compile's own scatter
    around the model (run-to-run jitter); `log_spread_sd`: how far the compiles may move a
    knob's spread from `unit` (the spread of its log); `outputs`: a level column after the
    knobs' is the row's output (an IPU), correlated by OUTPUT_CORRELATION across outputs, not
    a knob; `studies`: the last level column is the row's study (OWN: this one's), correlated
    by the fitted `study_correlation` across studies; `learn_noise`: fit the noise too (its
    prior median `noise`); `group_levels`: the level columns that are groups of structural
    choices, their prior spread `group_unit` (the interactions' too; without it, they start
    at half the unit);
    `widen`: a factor on every prior spread but the constant's (guide/trust.py)."""

    def __init__(
        self,
        numeric: np.ndarray,
        levels: np.ndarray,
        y: Sequence[float],
        groups: Sequence[Sequence[int]],
        unit: float,
        noise: float,
        log_spread_sd: float = LOG_SPREAD_SD,
        outputs: bool = False,
        studies: bool = False,
        learn_noise: bool = False,
        group_levels: Sequence[int] = (),
        group_unit: float | None = None,
        widen: float = 1.0,
    ):
        self.groups = [list(g) for g in groups]
        # each knob's coordinates averaged (a knob's distance is their RMS: guide/features.py)
        self._mean = np.zeros((numeric.shape[1], len(self.groups)))
        for j, g in enumerate(self.groups):
            self._mean[g, j] = 1.0 / len(g)
        self.outputs, self.studies, self.learn_noise = outputs, studies, learn_noise
        self.numeric, self.levels, self.study = numeric, *self._study_column(levels)
        knob_levels = self.levels.shape[1] - (1 if outputs else 0)
        self.y = np.asarray(y, dtype=float)
        self.unit, self.noise, self.log_spread_sd = unit, noise, log_spread_sd
        # terms: the constant, one per numeric knob, one per level (a level of a group of
        # structural choices at `group_unit`), and the interactions of two and of three knobs
        # (at `group_unit`; without one, at half the unit). All but the constant (which every
        # compile measures) are `widen`ed: guide/trust.py
        self._group_levels = set(group_levels)
        region = unit if group_unit is None else group_unit
        interaction = unit / 2 if group_unit is None else group_unit
        spreads = np.array(
            [unit]
            + [unit * widen] * (len(self.groups) + knob_levels)
            + [interaction * widen] * ORDERS
        )
        for column in group_levels:
            spreads[1 + len(self.groups) + column] = region * widen
        self._prior_log = np.log(spreads)
        self.log_spread = self._prior_log.copy()
        self.study_logit = 0.0  # rho = 1/2 until fitted
        self._chol: np.ndarray | None = None
        self._alpha: np.ndarray | None = None
        if len(self.y):
            self._fit()

    @property
    def study_correlation(self) -> float:
        """rho: how much of another study's residual at a config is this study's."""
        return _rho(self.study_logit) if self.studies else 1.0

    def _study_column(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return (levels[:, :-1], levels[:, -1]) if self.studies else (levels, None)

    def _across(self, study_a: np.ndarray | None, study_b: np.ndarray | None) -> np.ndarray | None:
        """Which pairs of rows are of different studies (None without studies)."""
        if study_a is None or study_b is None:
            return None
        across: np.ndarray = (study_a[:, None] != study_b[None, :]).astype(float)
        return across

    # --- the kernel ------------------------------------------------------------------------

    def _terms(
        self, num_a: np.ndarray, lvl_a: np.ndarray, num_b: np.ndarray, lvl_b: np.ndarray
    ) -> np.ndarray:
        """Every term's kernel at unit spread, stacked: (terms, rows of a, rows of b)."""
        scale = 1.0
        if self.outputs:
            same_output = lvl_a[:, None, -1] == lvl_b[None, :, -1]
            scale = OUTPUT_CORRELATION + (1 - OUTPUT_CORRELATION) * same_output
            lvl_a, lvl_b = lvl_a[:, :-1], lvl_b[:, :-1]
        d2 = ((num_a[:, None, :] - num_b[None, :, :]) ** 2) @ self._mean / LENGTH**2  # per knob
        slopes = ((num_a[:, None, :] - 0.5) * (num_b[None, :, :] - 0.5)) @ self._mean
        smooth = _m52(np.sqrt(d2))
        parts = [np.ones((len(num_a), len(num_b)))[..., None], smooth + slopes]
        base = [smooth]  # each knob's own kernel (1 where equal), the interactions' factors
        if lvl_a.shape[1]:
            same = (lvl_a[:, None, :] == lvl_b[None, :, :]).astype(float)
            parts.append(same)
            base.append(same[..., self._knob_level_columns(lvl_a.shape[1])])
        parts.extend(_interactions(np.concatenate(base, axis=-1)))
        return np.moveaxis(np.concatenate(parts, axis=-1), -1, 0) * scale

    def _knob_level_columns(self, width: int) -> list[int]:
        """The level columns that are one knob each (a group of structural choices is a
        combination of knobs already: not a factor of the interactions)."""
        return [j for j in range(width) if j not in self._group_levels]

    def _kernel(self, terms: np.ndarray, across: np.ndarray | None) -> np.ndarray:
        """The terms at the fitted spreads, summed, shared across studies by rho."""
        k = np.tensordot(np.exp(2 * self.log_spread), terms, axes=1)
        return k if across is None else k * _shared(self.study_correlation, across)

    def _self_terms(self, numeric: np.ndarray) -> np.ndarray:
        """k_t(x, x) of every term at each row: 1, but for the slopes' (x - 1/2)^2."""
        slopes = ((numeric - 0.5) ** 2) @ self._mean
        rows = len(numeric)
        knob_levels = self.levels.shape[1] - (1 if self.outputs else 0)
        # an interaction's kernel at a config itself: 1, or 0 with fewer knobs than its order
        knobs = len(self.groups) + len(self._knob_level_columns(knob_levels))
        orders = [float(k.item()) for k in _interactions(np.ones((1, knobs)))]
        return np.concatenate(
            [
                np.ones((rows, 1)),
                1.0 + slopes,
                np.ones((rows, knob_levels)),
                np.tile(orders, (rows, 1)),
            ],
            axis=1,
        ).T

    # --- fit and predict -------------------------------------------------------------------

    def _fit(self) -> None:
        """The spreads (rho, and with `learn_noise` the noise) at the posterior mode: ascend
        log evidence + log prior in log spread (Adam's normalised steps: a term whose gradient
        is nil, a knob no compile moved, stays where its prior puts it). The noise's prior is
        log-normal around the one given, NOISE_SD wide."""
        terms = self._terms(self.numeric, self.levels, self.numeric, self.levels)
        across = self._across(self.study, self.study)
        n, count = len(self.y), len(self._prior_log)
        # theta: the terms' log spreads, log noise, (logit rho); and the prior's centres
        theta = np.concatenate(
            [
                self.log_spread,
                [math.log(self.noise)],
                [self.study_logit] if across is not None else [],
            ]
        )
        prior = np.concatenate(
            [self._prior_log, [math.log(self.noise)], [0.0] if across is not None else []]
        )
        sd = np.full(len(theta), self.log_spread_sd)
        sd[count] = NOISE_SD
        if across is not None:
            sd[-1] = STUDY_LOGIT_SD
        m, v = np.zeros_like(theta), np.zeros_like(theta)
        eye = np.eye(n)
        for step in range(1, STEPS + 1):
            spreads = np.exp(2 * theta[:count])
            noise2 = math.exp(2 * theta[count])
            if across is None:
                shared = terms
            else:
                rho = _rho(theta[-1])
                shared = terms * _shared(rho, across)
            k = np.tensordot(spreads, shared, axes=1) + (noise2 + 1e-10) * eye
            inv = np.linalg.inv(k)
            alpha = inv @ self.y
            grad = np.zeros_like(theta)
            # d log evidence / d theta_t = s_t^2 (alpha' K_t alpha - tr(K^-1 K_t)), the
            # noise's alike
            grad[:count] = spreads * (
                np.einsum("i,tij,j->t", alpha, shared, alpha) - np.einsum("ij,tji->t", inv, shared)
            )
            if self.learn_noise:
                grad[count] = noise2 * (alpha @ alpha - np.trace(inv))
            if across is not None:
                # d K / d logit(rho) = rho (1 - rho) (the terms across studies)
                parts = rho * (1.0 - rho) * np.tensordot(spreads, terms, axes=1) * across
                grad[-1] = 0.5 * (alpha @ parts @ alpha - np.einsum("ij,ji->", inv, parts))
            grad -= (theta - prior) / sd**2
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad * grad
            theta = theta + RATE * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
        self.log_spread = theta[:count]
        self.noise = math.exp(float(theta[count]))
        if across is not None:
            self.study_logit = float(theta[-1])
        k = self._kernel(terms, across) + (self.noise**2 + 1e-10) * eye
        self._chol = chol = np.linalg.cholesky(k)
        self._alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, self.y))

    def _variance(self, numeric: np.ndarray) -> np.ndarray:
        variance: np.ndarray = np.exp(2 * self.log_spread) @ self._self_terms(numeric)
        return variance

    def predict(self, numeric: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the residual at each row."""
        prior = self._variance(numeric)
        if self._alpha is None or self._chol is None:  # set together (_fit)
            return np.zeros(len(numeric)), np.sqrt(prior)
        k, v = self._to_fitted(numeric, *self._study_column(levels))
        mean = k @ self._alpha
        return mean, np.sqrt(np.maximum(prior - (v * v).sum(0), 1e-12))

    def _to_fitted(
        self, numeric: np.ndarray, levels: np.ndarray, study: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The prior covariance k of each row with the fitted rows, and L^-1 k' (L the fitted
        rows' Cholesky factor): what predict and covariance take off the prior."""
        assert self._chol is not None  # fitted (_fit)
        k = self._kernel(
            self._terms(numeric, levels, self.numeric, self.levels),
            self._across(study, self.study),
        )
        return k, np.linalg.solve(self._chol, k.T)

    def covariance(
        self, num_a: np.ndarray, lvl_a: np.ndarray, num_b: np.ndarray, lvl_b: np.ndarray
    ) -> np.ndarray:
        """Posterior covariance of the residuals at each row of a with each row of b: how far
        what a compile at b shows moves the figure at a."""
        (lvl_a, study_a), (lvl_b, study_b) = self._study_column(lvl_a), self._study_column(lvl_b)
        k = self._kernel(self._terms(num_a, lvl_a, num_b, lvl_b), self._across(study_a, study_b))
        if self._chol is None:
            return k
        _, va = self._to_fitted(num_a, lvl_a, study_a)
        _, vb = self._to_fitted(num_b, lvl_b, study_b)
        out: np.ndarray = k - va.T @ vb
        return out

    def correlation(
        self, num_a: np.ndarray, lvl_a: np.ndarray, num_b: np.ndarray, lvl_b: np.ndarray
    ) -> np.ndarray:
        """Prior correlation of the residuals at each row of a with each row of b: how much of
        one's outcome is the other's."""
        (lvl_a, study_a), (lvl_b, study_b) = self._study_column(lvl_a), self._study_column(lvl_b)
        k = self._kernel(self._terms(num_a, lvl_a, num_b, lvl_b), self._across(study_a, study_b))
        correlation: np.ndarray = k / np.sqrt(
            self._variance(num_a)[:, None] * self._variance(num_b)[None, :]
        )
        return correlation
