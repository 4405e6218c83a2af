"""Tile memory as the compiles show it: a fixed and a proportional part, learnt with their
uncertainty, and a chance to fit.

A single multiplier (measured / estimated busiest tile) reads a fixed cost per tile that the
estimator lacks (code, exchange buffers, sync state) as a ratio: the lightly loaded IPU of a
pipeline shows the largest ratio, and the multiplier then puts a heavily loaded candidate far
over memory, ruling out configs that fit. Here each IPU of each
compile (fitting or not: an out-of-memory compile reports its tiles too) is a point

    measured = fixed + per_stage x (stages - 1) + per_replica x (replicas - 1)
               + per_checkpoint x segments + fixed[layout]
               + (proportional + proportional[layout] + sum_c deviation_c x share_c) x estimated

in fractions of a tile, where share_c is the estimator's share of memory category c on that
IPU, so a category the estimator gets wrong (planner temporaries, stash) is learnt apart. A
layout (guide/apart.layout) may have a proportion of its own: on an IPU nobody modelled the
compiler's choices can differ between a pipeline and a sharded model, and compiles that all ran
over in one layout then say less of another than of theirs (a layout no compile ran in is
unsure by that part's prior: after out-of-memory compiles in one layout, a leaner one keeps a
chance to fit). The fixed cost may grow with the pipeline's stages (code and exchange per
stage), the replicas (their synchronisation) or the recomputation segments per IPU (each
recomputed by its own code): learnt as slopes, they carry to a layout or a recomputation not
yet compiled. A Bayesian linear regression with a prior for each part (PRIORS: nothing fixed,
the estimate's proportion, no category or layout difference) gives their posterior means and
covariance; the noise is the residual spread shrunk towards NOISE_PRIOR. A slope's prior may be
wider than PRIORS: the model averages that hypothesis, one slope at a time, with PRIORS' own,
each weighed by the compiles' evidence (its marginal likelihood; SLOPES, WIDER), so a cost an
IPU has at many prior spreads is learnt, where the other parts took it up and predicted it
wrong. A candidate's busiest tile is then a normal with the averaged model's predictive mean
and spread, and its chance to fit is the smallest of its IPUs' (their errors share the learnt
parts, so they move together).

Only the estimator's outputs (busiest tile and breakdown per IPU) and Config's layout are used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..measurement import CATEGORIES, Measurement
from .cholesky import cholesky, inverse, log_det, solve
from .memory_points import MemoryPoint, ipu_shares
from .prior import GuidePrior

#: prior (mean, standard deviation) of each part, in fractions of a tile
PRIORS = {
    "fixed": (0.0, 0.10),
    "proportional": (1.0, 0.30),
    "category": (0.0, 0.15),
    "layout": (0.0, 0.05),
    # a layout's own proportion: as wide as a category's (the compiler's choices per layout)
    "layout scale": (0.0, 0.15),
    "per stage": (0.0, 0.02),
    "per replica": (0.0, 0.02),
    "per checkpoint": (0.0, 0.01),
}
#: measurement and model noise of one IPU's busiest tile before any residual is seen (fraction
#: of a tile), and how many points' worth of weight that guess carries against the residuals
NOISE_PRIOR, NOISE_PRIOR_POINTS = 0.02, 2.0
#: the fixed costs' slopes, whose size differs most from one IPU and SDK to the next (PRIORS
#: holds a recomputation segment's at 0.01 of a tile; an IPU may have ten times that)
SLOPES = ("per stage", "per replica", "per checkpoint")
#: the hypotheses the compiles weigh: PRIORS as they are, with this prior probability, or one
#: slope's prior this many times wider (the rest of the probability, shared evenly). Each is
#: weighed by its evidence (the marginal likelihood of the points), and the model is their
#: average: where the compiles cannot yet tell which slope an excess belongs to (one compile
#: of a new layout holds more than the others, and its stages, replicas and segments per IPU
#: all differ), the candidates it bears on are given that doubt, not one slope's answer
AS_GIVEN, WIDER = 0.5, (4.0, 16.0)


def _prior_covariance(
    names: list[str], priors: list[tuple[float, float]], prior: GuidePrior | None
) -> list[list[float]]:
    """The parts' prior covariance: diagonal from the spreads, except where a store's prior
    gives the covariance of its parts (their fit on other studies' compiles moves the
    proportional part and the per-category deviations together: their spreads alone would
    make a new model's tiles far less certain than those compiles say)."""
    n = len(names)
    cov = [[priors[i][1] ** 2 if i == j else 0.0 for j in range(n)] for i in range(n)]
    if prior is None or not prior.memory_cov:
        return cov
    index = {name: i for i, name in enumerate(names)}
    given = [index.get(name) for name in prior.memory]
    for a, i in enumerate(given):
        for b, j in enumerate(given):
            if i is not None and j is not None:
                cov[i][j] = prior.memory_cov[a][b]
    return cov


def _widened(cov: list[list[float]], widths: dict[int, float]) -> list[list[float]]:
    """`cov` with part i's spread times widths[i] (its covariances with the others alike)."""
    return [
        [v * widths.get(i, 1.0) * widths.get(j, 1.0) for j, v in enumerate(row)]
        for i, row in enumerate(cov)
    ]


class MemoryModel:
    """The learnt fixed and proportional parts (see the module's docstring)."""

    # set by _settle and _fit (annotations only, for the type checker: no class attributes)
    mean: list[float]
    noise: float
    _low: list[list[float]]
    _prior_precision: list[list[float]]

    def __init__(
        self,
        points: list[MemoryPoint],
        prior: GuidePrior | None = None,
        own_proportions: bool = True,
    ):
        """`prior`: a guide.prior.GuidePrior whose parts replace PRIORS (other studies'
        compiles). `own_proportions`: each layout's own proportion (off for a store's fit
        over many models: what it carries is the proportion they share)."""
        self.points = points
        self.layouts = sorted({p.layout for p in points}, key=repr)
        self.own_proportions = own_proportions
        self.scaled = self.layouts if own_proportions else []  # layouts with their own
        names = [
            "fixed",
            "proportional",
            "per stage",
            "per replica",
            "per checkpoint",
            *(f"category {c}" for c in CATEGORIES),
            *(f"layout {lay}" for lay in self.layouts),
            *(f"layout scale {lay}" for lay in self.scaled),
        ]
        priors = [
            PRIORS["fixed"],
            PRIORS["proportional"],
            PRIORS["per stage"],
            PRIORS["per replica"],
            PRIORS["per checkpoint"],
            *[PRIORS["category"]] * len(CATEGORIES),
            *[PRIORS["layout"]] * len(self.layouts),
            *[PRIORS["layout scale"]] * len(self.scaled),
        ]
        self.names = names
        #: a layout part's prior spread: the default's, scaled by what the store showed
        #: (guide/prior.py)
        scale = 1.0 if prior is None else prior.memory_scale
        self.layout_sd = PRIORS["layout"][1] * scale
        self.layout_scale_sd = PRIORS["layout scale"][1] * scale
        if prior is not None:
            priors = [
                prior.memory.get(name, (p[0], p[1] * scale) if name.startswith("layout ") else p)
                for name, p in zip(names, priors, strict=True)
            ]  # built part for part
        self.prior_mean = [m for m, _ in priors]
        self._prior_cov = _prior_covariance(names, priors, prior)
        self._diagonal = prior is None or not prior.memory_cov
        self._noise_prior = NOISE_PRIOR if prior is None or prior.noise is None else prior.noise
        # what the points say, whatever the priors: X'X, X'y and y'y
        n = len(names)
        self._gram, self._xy, self._yy = [[0.0] * n for _ in range(n)], [0.0] * n, 0.0
        for p in points:
            x = self._x(p.layout, p.estimated, p.shares, p.checkpoints)
            nonzero = [(i, xi) for i, xi in enumerate(x) if xi]
            for i, xi in nonzero:
                self._xy[i] += xi * p.measured
                for j, xj in nonzero:
                    self._gram[i][j] += xi * xj
            self._yy += p.measured**2
        #: (prior times evidence, normalised; {slope: width}) per hypothesis kept
        self.weights: list[tuple[float, dict[str, float]]] = []
        hypotheses = (
            [(AS_GIVEN, {})]
            if not points
            else [(AS_GIVEN, {})]
            + [
                ((1.0 - AS_GIVEN) / (len(SLOPES) * len(WIDER)), {slope: width})
                for slope in SLOPES
                for width in WIDER
            ]
        )
        fits = []
        for prior_weight, widths in hypotheses:
            evidence = self._settle(widths)
            cov = inverse(self._low)
            fits.append((math.log(prior_weight) + evidence, widths, self.mean, cov, self.noise))
        top = max(f[0] for f in fits)
        total = sum(math.exp(f[0] - top) for f in fits)
        kept = [(math.exp(f[0] - top) / total, *f[1:]) for f in fits]
        kept = [f for f in kept if f[0] >= 1e-3]
        norm = sum(f[0] for f in kept)
        self.weights = [(w / norm, widths) for w, widths, *_ in kept]
        # The average of the hypotheses, as one normal with its moments: a candidate's spread is
        # then x' cov x + noise^2 as for one fit (thousands of candidates per proposal)
        self.mean = [sum(w / norm * m[i] for w, _, m, _, _ in kept) for i in range(n)]
        self._cov = [
            [
                sum(w / norm * (c[i][j] + m[i] * m[j]) for w, _, m, c, _ in kept)
                - self.mean[i] * self.mean[j]
                for j in range(n)
            ]
            for i in range(n)
        ]
        self.noise = math.sqrt(sum(w / norm * noise**2 for w, _, _, _, noise in kept))

    def _settle(self, widths: dict[str, float]) -> float:
        """Fit with the slopes' priors `widths` times wider than given: the posterior mean, then
        the noise from the residuals (shrunk to the prior), then the mean again, left in `mean`,
        `noise` and `_low` (the posterior precision's Cholesky factor). Returns the log evidence
        of the points (their marginal likelihood) under those priors."""
        n = len(self.names)
        cov = _widened(self._prior_cov, {self.names.index(k): w for k, w in widths.items()})
        cov_low = cholesky(cov)
        self._prior_precision = (
            [[1.0 / cov[i][i] if i == j else 0.0 for j in range(n)] for i in range(n)]
            if self._diagonal
            else inverse(cov_low)
        )
        self.noise = self._noise_prior
        self.mean = self._fit()
        if not self.points:
            return 0.0
        self.noise = math.sqrt(
            (NOISE_PRIOR_POINTS * self._noise_prior**2 + self._rss(self.mean))
            / (NOISE_PRIOR_POINTS + len(self.points))
        )
        self.mean = self._fit()
        m, w = self.mean, 1.0 / self.noise**2
        apart = [mi - m0 for mi, m0 in zip(m, self.prior_mean, strict=True)]  # one per part, both
        return -0.5 * (
            len(self.points) * math.log(2 * math.pi * self.noise**2)
            + log_det(cov_low)
            + log_det(self._low)
            + w * self._rss(m)
            + self._dot(apart, [self._dot(row, apart) for row in self._prior_precision])
        )

    def _rss(self, m: list[float]) -> float:
        """The points' residual sum of squares at parts `m` (y'y - 2 m'X'y + m'X'X m)."""
        return max(
            0.0,
            self._yy
            - 2 * self._dot(m, self._xy)
            + self._dot(m, [self._dot(row, m) for row in self._gram]),
        )

    def _x(
        self,
        lay: tuple[Any, ...],
        estimated: float,
        shares: tuple[float, ...],
        checkpoints: float = 0.0,
    ) -> list[float]:
        stages, replicas = lay[0], lay[1]
        return [
            1.0,
            estimated,
            stages - 1.0,
            replicas - 1.0,
            checkpoints,
            *(estimated * s for s in shares),
            *(1.0 if lay == L else 0.0 for L in self.layouts),
            *(estimated if lay == L else 0.0 for L in self.scaled),
        ]

    @staticmethod
    def _dot(a: list[float], b: list[float]) -> float:
        # the vectors are the parts' length, but `tile` takes its caller's shares: not strict,
        # so a shares tuple of another length reads as it always did
        return sum(x * y for x, y in zip(a, b, strict=False))

    def _fit(self) -> list[float]:
        w = 1.0 / self.noise**2
        # n x n and n (n: the parts), all built from self.names
        precision = [
            [p + w * g for p, g in zip(prow, grow, strict=True)]
            for prow, grow in zip(self._prior_precision, self._gram, strict=True)
        ]
        b = [
            self._dot(row, self.prior_mean) + w * xy
            for row, xy in zip(self._prior_precision, self._xy, strict=True)
        ]
        self._low = cholesky(
            precision
        )  # the posterior precision's factor: the mean, its inverse, its determinant
        return solve(self._low, b)

    def covariance(self, names: list[str]) -> list[list[float]]:
        """The posterior covariance of the named parts (a store's prior keeps how they move
        together: guide/prior.py)."""
        index = [self.names.index(n) for n in names]
        return [[self._cov[i][j] for j in index] for i in index]

    def part(self, name: str) -> tuple[float, float]:
        """(posterior mean, standard deviation) of one part, e.g. "fixed" or "proportional"."""
        i = self.names.index(name)
        return self.mean[i], math.sqrt(max(0.0, self._cov[i][i]))

    def tile(
        self,
        lay: tuple[Any, ...],
        estimated: float,
        shares: tuple[float, ...],
        checkpoints: float = 0.0,
    ) -> tuple[float, float]:
        """(mean, standard deviation) of one IPU's busiest tile, fractions of a tile. A layout
        no compile ran in has no parts of its own (a fixed part, a proportion): their prior
        spreads are added instead."""
        x = self._x(lay, estimated, shares, checkpoints)
        nonzero = [(i, xi) for i, xi in enumerate(x) if xi]
        var = (
            sum(xi * xj * self._cov[i][j] for i, xi in nonzero for j, xj in nonzero)
            + self.noise**2
        )
        if lay not in self.layouts:
            var += self.layout_sd**2
            if self.own_proportions:
                var += (self.layout_scale_sd * estimated) ** 2
        return self._dot(x, self.mean), math.sqrt(var)

    def busiest(
        self, lay: tuple[Any, ...], estimate: Measurement, checkpoints: float = 0.0
    ) -> list[tuple[float, float]]:
        """Per IPU of a candidate in layout `lay` (its nominal estimate, its recompute_segments),
        the predicted busiest tile."""
        cap = estimate.tile_capacity_bytes
        parts: Sequence[dict[str, int] | None] = estimate.breakdown or [None] * len(
            estimate.max_tile_bytes
        )
        # as memory_points: a breakdown of another length is read as far as it goes
        return [
            self.tile(lay, t / cap, ipu_shares(b), checkpoints)
            for t, b in zip(estimate.max_tile_bytes, parts, strict=False)
        ]
