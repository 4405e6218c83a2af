"""How far the compiles say this IPU departs from the corrected estimator, against how far the
calibration set says the estimator departs from real IPUs: the study's misfit.

The calibration set's published throughputs put a configuration's estimate within a log
error of about CALIBRATED_SD (one standard deviation: the estimate's 90 % throughput error
bar, backends/estimate/error_bars.py, over 1.645). The guide's prior spreads of what no
compile has measured (guide/corrected.py: each knob's and each group of structural
choices') are of that size, on top of the device and host factors the compiles teach
(guide/call_model.py). So a compile tests those spreads where the factors did not come from
it: its error against the estimate corrected by the factors the compiles of *other* layouts
give (with every compile in one layout, the prior's factors: the nominal estimate without a
store). Every prior spread is scaled by

    misfit = start * max(1, sqrt((PRIOR_COMPILES + sum (z / start)^2) / (PRIOR_COMPILES + n))),
    start = sqrt((PRIOR_COMPILES + sum z_s^2) / (PRIOR_COMPILES + N)), or 1 without a store,
        z = log(measured / corrected elsewhere) / CALIBRATED_SD

over the study's n timed compiles and the store's N (z_s) on this IPU: each the posterior
mean of the error's variance ratio under an inverse-gamma prior worth PRIOR_COMPILES
compiles, at the calibrated error for the store's, at the store's for the study's. The
least assumed is the population's: without a store, the calibration set's spread (misfit
at least 1: a study's few compiles, in few layouts, say little of the layouts they did not
reach); with one, the scale the store's compiles of other models on this IPU show
(`elsewhere`), which may be narrower. The study's own compiles then only widen it. An IPU
whose layouts the factors learnt elsewhere do not foresee is as unsure where nothing was
compiled (the trust in the estimator's ranking decays as compiles contradict it); one whose
every layout they foresee, over a store's dozens of compiles, is surer than the calibration
set says (a compile's own scatter is apart: guide/knob_effects.py).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from statistics import NormalDist

from ..backends.estimate.error_bars import THROUGHPUT_LOG_WIDTH
from .call_model import CallModel, CallTime

#: the estimator's log error of a configuration's throughput on the calibration set's IPUs
CALIBRATED_SD = THROUGHPUT_LOG_WIDTH["all"] / NormalDist().inv_cdf(0.95)
#: the prior's weight, in compiles at the calibrated error
PRIOR_COMPILES = 2


def misfit(
    calls: Sequence[tuple[Hashable, CallTime]],
    elsewhere: Sequence[float] = (),
    prior: tuple[float, float, float] | None = None,
) -> float:
    """The factor by which the errors of what the compiles did not teach exceed the
    calibrated error. `calls`: this study's timed compiles (each with its layout), each
    judged against the estimate corrected by the call factors the compiles of other layouts
    give (`held_out_errors`, from the call factors' `prior`). `elsewhere`: the calibration
    store's such errors, of other studies on this IPU (guide/prior.py): their scale is where
    this study starts (without a store, the calibration set's: 1), and its own compiles,
    few and in few layouts, only widen it."""
    start = excess([(e / CALIBRATED_SD) ** 2 for e in elsewhere], floor=0.0) if elsewhere else 1.0
    own = [(e / CALIBRATED_SD / start) ** 2 for e in held_out_errors(calls, prior)]
    return start * excess(own)


def held_out_errors(
    calls: Sequence[tuple[Hashable, CallTime]], prior: tuple[float, float, float] | None = None
) -> list[float]:
    """Each timed compile's log(measured / corrected) throughput, corrected by the device and
    host factors (guide/call_model.py, from `prior`) that the compiles of the other regions
    give (a region: guide/apart.layout): what the estimator gets wrong in a region none of
    the factors' compiles reached, which the knob-effect model must carry where nothing was
    compiled. With every compile in one region, the prior's factors alone (the nominal
    estimate without a store)."""
    timed = [(region, c) for region, c in calls if c.measured_s]
    elsewhere = {  # one fit per region, not per compile
        region: CallModel([o for r, o in timed if r != region], prior)
        for region in dict.fromkeys(r for r, _ in timed)
    }
    return [elsewhere[region].log_residual(c) for region, c in timed]


def excess(z2: Sequence[float], floor: float = 1.0) -> float:
    """The factor (at least `floor`) on a spread whose errors, in that spread, squared, are
    `z2`: sqrt((PRIOR_COMPILES + sum z^2) / (PRIOR_COMPILES + n)), the inverse-gamma
    posterior mean of their variance ratio (guide/hindsight.py applies it to the memory
    forecasts)."""
    return max(floor, math.sqrt((PRIOR_COMPILES + sum(z2)) / (PRIOR_COMPILES + len(z2))))
