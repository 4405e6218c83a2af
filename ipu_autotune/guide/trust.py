"""How far the compiles say this IPU departs from the estimator, against how far the
calibration set says the estimator departs from real IPUs: the study's misfit.

The calibration set's published throughputs put a configuration's estimate within a log
error of about CALIBRATED_SD (one standard deviation: the estimate's 90 % throughput error
bar, backends/estimate/error_bars.py, over 1.645). The guide's prior spreads of what no
compile has measured (guide/corrected.py: each knob's and each group of structural
choices') are of that size. A study whose compiles are off the estimate by much more is on
an IPU the calibration set does not describe, and what the estimator ranks highly where
nothing was compiled is as uncertain: every prior spread is widened by

    misfit = sqrt((PRIOR_COMPILES + sum z^2) / (PRIOR_COMPILES + n)),
        z = log(measured / estimated) / CALIBRATED_SD

over the n compiles that ran, this study's and the calibration store's other studies' on
this IPU (the posterior mean of the error's variance ratio under an inverse-gamma prior
worth PRIOR_COMPILES compiles at the calibrated error). Compiles that
agree with the estimator never narrow it below 1: a few compiles in one region say little of
the regions they did not reach, so the calibration set's spread is the least assumed. This is
the trust in the estimator's ranking, decaying as compiles contradict it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

from ..backends.estimate.error_bars import THROUGHPUT_LOG_WIDTH
from .call_model import CallTime

#: the estimator's log error of a configuration's throughput on the calibration set's IPUs
CALIBRATED_SD = THROUGHPUT_LOG_WIDTH["all"] / NormalDist().inv_cdf(0.95)
#: the prior's weight, in compiles at the calibrated error
PRIOR_COMPILES = 2


def misfit(calls: Sequence[CallTime], elsewhere: Sequence[float] = ()) -> float:
    """The factor (at least 1) by which the compiles' errors exceed the calibrated error.
    `elsewhere`: other studies' errors on this IPU (log measured over estimated throughput,
    from the calibration store: guide/prior.py), pooled with this study's: an IPU the
    estimator was far off for other models is as unsure for this one before its compiles
    say otherwise."""
    return excess([(e / CALIBRATED_SD) ** 2 for e in [*log_errors(calls), *elsewhere]])


def log_errors(calls: Sequence[CallTime]) -> list[float]:
    """Each timed compile's error against the nominal estimate: log(measured / estimated)
    throughput (the misfit's, and a calibration store's for a new study's)."""
    return [math.log(c.combined(1.0, 1.0) / c.measured_s) for c in calls if c.measured_s]


def excess(z2: Sequence[float]) -> float:
    """The factor (at least 1) on a spread whose errors, in that spread, squared, are `z2`:
    sqrt((PRIOR_COMPILES + sum z^2) / (PRIOR_COMPILES + n)), the inverse-gamma posterior
    mean of their variance ratio (guide/hindsight.py applies it to the memory forecasts)."""
    return max(1.0, math.sqrt((PRIOR_COMPILES + sum(z2)) / (PRIOR_COMPILES + len(z2))))
