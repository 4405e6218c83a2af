"""Time per call as the compiles show it: the device and the host learnt apart.

The estimate splits a call into the IPUs' part D (compute, weight update, all-reduce, the
call's round trip) and the host's input part H (reading and preparing the samples), and
combines them as the loader does: max(D, H) when the loader overlaps the device, D + H when
it does not (host/pipeline.end_to_end). A compile measures only the whole: samples per
second. One multiplier per config cannot tell "the device is 20 % slower" from "the host
is": on a plateau the model puts at its host cap every candidate gets the same multiplier
and the ranking stays flat, where on the hardware the device is the bottleneck and the
candidates differ (issue 22). So two factors are learnt, `device` and `host`, and how much
of the shorter side an overlapped loader fails to hide, `leak` (host threads contending
with the driver, a queue that drains at each call):

    measured call time = max(device x D, host x H) + leak x min(device x D, host x H)

(D + H without overlap), by least squares on log time, with a log-normal prior on each
factor (PRIOR_SD) and a half-normal one on the leak (LEAK_SD): a grid, refined twice (`max`
has no gradient where the bottleneck moves). Compiles with different bottlenecks pin both
factors; where every compile is device-bound the host factor stays near its prior. With a
leak, a config the estimate puts at its host cap is still faster for a faster device: where
the loader overlaps imperfectly, optimizer offload (free to a model without a leak) costs
speed, and the model sees it. What the factors leave unexplained (per-layout costs such as
pipeline fill or the all-reduce) is the residual, which guide/corrected.py blends per config.

Only the estimator's outputs (throughput, samples per call, the call's shares) are used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

from ..measurement import Measurement

#: prior spread of log(device factor) and log(host factor): a real IPU or host within ~x1.35
PRIOR_SD = 0.3
#: prior spread of the overlap's leak (a half-normal from 0: a loader that hides the shorter
#: side entirely, as the estimate assumes)
LEAK_SD = 0.25
#: the leaks the fit tries, before its refinement
_LEAKS = (0.0, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)
#: spread of one compile's log time around the two-factor model (run-to-run jitter and what
#: the factors cannot express), used to weigh the compiles against the prior
NOISE_SD = 0.05
#: the coarse grid of log factors, then two refinements around its best point
_GRID = (1.5, 0.1)
_REFINE = ((0.1, 0.01), (0.01, 0.001))
_FITS: dict[tuple[Any, ...], tuple[float, float, float]] = {}  # CallModel._cached_fit


@dataclass(frozen=True)
class CallTime:
    """One config's call as the estimate splits it, and (compiled) as measured."""

    device_s: float
    host_s: float
    overlapped: bool
    samples: float
    measured_s: float | None = None

    def combined(self, device: float, host: float, leak: float = 0.0) -> float:
        d, h = device * self.device_s, host * self.host_s
        return max(d, h) + leak * min(d, h) if self.overlapped else d + h


def call_time(
    estimate: Measurement, overlapped: bool, measured: Measurement | None = None
) -> CallTime | None:
    """The estimate's call split into device and host parts (None without a throughput)."""
    shares = (estimate.details or {}).get("call_shares")
    if not estimate.throughput or not estimate.samples_per_call or not shares:
        return None
    call = estimate.samples_per_call / estimate.throughput
    host = shares.get("host input", 0.0) * call
    device = sum(v for k, v in shares.items() if k != "host input") * call
    got = None
    if measured is not None and measured.feasible and measured.throughput:
        got = estimate.samples_per_call / measured.throughput
    return CallTime(device, host, overlapped, estimate.samples_per_call, got)


class CallModel:
    """The learnt device and host factors (see the module's docstring)."""

    def __init__(self, points: list[CallTime], prior: tuple[float, float, float] | None = None):
        """`prior`: (log device, log host, spread of each) from other studies (guide/prior.py);
        None: factors of 1 within PRIOR_SD."""
        self.points = [p for p in points if p.measured_s]
        self.prior = prior or (0.0, 0.0, PRIOR_SD)
        self.log_device, self.log_host, self.leak = (
            self._cached_fit() if self.points else (*self.prior[:2], 0.0)
        )

    @property
    def device(self) -> float:
        return math.exp(self.log_device)

    @property
    def host(self) -> float:
        return math.exp(self.log_host)

    def _loss(self, u: float, v: float, leak: float) -> float:
        du, hv = math.exp(u), math.exp(v)
        # self.points are the measured calls (__init__): no measured_s is None
        fit = (
            sum(
                (math.log(cast(float, p.measured_s) / p.combined(du, hv, leak))) ** 2
                for p in self.points
            )
            / NOISE_SD**2
        )
        mu, mv, sd = self.prior
        return fit + ((u - mu) ** 2 + (v - mv) ** 2) / sd**2 + (leak / LEAK_SD) ** 2

    def _cached_fit(self) -> tuple[float, float, float]:
        """_fit, once per set of compiles and prior: a proposal builds several models of them."""
        key = (tuple(self.points), self.prior)
        if key not in _FITS:
            if len(_FITS) > 1_000:  # bounded: a long study must not grow it forever
                _FITS.clear()
            _FITS[key] = self._fit()
        return _FITS[key]

    def _fit(self) -> tuple[float, float, float]:
        span, step = _GRID
        mu, mv, _ = self.prior
        # a leak shows only where a compile's loader overlaps and neither side is negligible
        leaks = (
            _LEAKS
            if any(p.overlapped and p.host_s > 0 and p.device_s > 0 for p in self.points)
            else (0.0,)
        )
        best = min(
            (self._loss(u, v, g), u, v, g)
            for g in leaks
            for u in _steps(mu, span, step)
            for v in _steps(mv, span, step)
        )
        for span, step in _REFINE:
            _, cu, cv, cg = best
            near = {max(0.0, cg + i * step * 5) for i in range(-3, 4)} if len(leaks) > 1 else {0.0}
            best = min(
                best,
                *(
                    (self._loss(u, v, g), u, v, g)
                    for g in near
                    for u in _steps(cu, span, step)
                    for v in _steps(cv, span, step)
                ),
            )
        return best[1], best[2], best[3]

    def predict(self, p: CallTime) -> float:
        """Samples per second the learnt factors give a config (before its residual)."""
        return p.samples / p.combined(self.device, self.host, self.leak)

    def log_residual(self, p: CallTime) -> float:
        """log(measured / learnt) throughput of a compiled config."""
        assert p.measured_s is not None  # a compiled config's: its callers pass measured calls
        return math.log(p.combined(self.device, self.host, self.leak) / p.measured_s)


def _steps(centre: float, span: float, step: float) -> list[float]:
    n = int(round(span / step))
    return [centre + i * step for i in range(-n, n + 1)]
