"""Screening: skip a many-minute compile when the estimator says a config is far over memory.

The estimator is fast and roughly right; a compile is slow and right. A candidate whose
busiest tile the estimator puts more than `margin` over capacity (Measurement.violation, a
fraction) would need the estimator to be wrong by that much to fit, so it is returned as
the estimator's OOM (source "estimate", never labelled as compiled) and counted as a
compile saved. Everything else, including near misses, is compiled: near the line the
estimator is a coin toss (docs/estimator.md).

A compile without attached IPUs says whether a config fits but not how fast it runs; the
study would then rank every feasible config at zero. So a compiled, feasible Measurement
without throughput gets the estimator's (`details["throughput_source"] = "estimate"`):
the memory verdict is compiled, the speed is estimated, and the record says which is which.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeGuard

from ..problem import Config, Problem
from .base import Backend, Measurement

#: config -> a reason not to compile it, or None (calibration/session.prior_veto)
Veto = Callable[[Config], str | None]


class ScreenedBackend(Backend):
    """`inner` measures; `screen` (an EstimateBackend, or None for no screening) vetoes what it
    puts more than `margin` over memory, and `veto` what it names a reason for; the nominal
    estimate is still what a screened record holds."""

    def __init__(
        self,
        inner: Backend,
        screen: Backend | None,
        margin: float = 0.25,
        estimate_missing_throughput: bool = True,
        veto: Veto | None = None,
    ):
        if margin < 0:
            raise ValueError(f"screening margin must be >= 0, got {margin}")
        self.inner = inner
        self.screen = screen
        self.margin = float(margin)
        self.estimate_missing_throughput = estimate_missing_throughput
        self.name = inner.name
        self.source = inner.source
        self.compiles_saved = 0
        self.compiles_run = 0
        self.veto = veto
        self.screen_errors = 0

    @property
    def sdk(self) -> str | None:
        return self.inner.sdk

    def describe(self) -> str:
        if self.screen is None:
            return self.inner.describe()
        return f"{self.inner.describe()}, screened by the estimator (margin {self.margin:.0%})"

    def measure(self, problem: Problem, config: Config) -> Measurement:
        predicted = self._predict(problem, config)
        if self._over_margin(predicted):
            self.compiles_saved += 1
            return self._screened(predicted)
        vetoed = self._vetoed(config, predicted)
        if (
            vetoed and predicted is not None
        ):  # the estimate corrected by other studies' compiles (calibration store) rules it out
            self.compiles_saved += 1
            return self._screened(predicted, vetoed)
        self.compiles_run += 1
        m = self.inner.measure(problem, config)
        if predicted is not None:
            m.details.setdefault("screen_violation", round(predicted.violation, 4))
            if (
                self.estimate_missing_throughput
                and m.feasible
                and m.throughput is None
                and predicted.throughput is not None
            ):
                m.throughput, m.step_time_s = predicted.throughput, predicted.step_time_s
                for key in (
                    "device_throughput",
                    "samples_per_call",
                    "host_bytes_per_call",
                    "bottleneck",
                    "bottleneck_share",
                    "throughput_interval",
                    "device_throughput_interval",
                ):
                    setattr(m, key, getattr(predicted, key))
                m.details["throughput_source"] = "estimate"
        return m

    def would_compile(self, problem: Problem, config: Config) -> bool:
        predicted = self._predict(problem, config)
        return not self._over_margin(predicted) and not self._vetoed(config, predicted)

    def _over_margin(self, predicted: Measurement | None) -> TypeGuard[Measurement]:
        return (
            predicted is not None
            and predicted.failure in (None, "oom")
            and predicted.violation > self.margin
        )

    def _vetoed(self, config: Config, predicted: Measurement | None) -> str | None:
        return self.veto(config) if self.veto is not None and predicted is not None else None

    def _predict(self, problem: Problem, config: Config) -> Measurement | None:
        if self.screen is None:
            return None
        try:
            return self.screen.measure(problem, config)
        except Exception:  # the screen is advice: if it cannot judge, compile
            self.screen_errors += 1
            return None

    def _screened(self, predicted: Measurement, why: str | None = None) -> Measurement:
        ipu = predicted.worst_ipu()
        where = f" on IPU{ipu}" if ipu is not None else ""
        reason = (
            (
                f"not compiled: estimated {predicted.violation:.0%} over tile memory{where}, "
                f"beyond the screening margin of {self.margin:.0%}"
            )
            if why is None
            else f"not compiled: {why}"
        )
        details = dict(
            predicted.details, screened=True, screen_violation=round(predicted.violation, 4)
        )
        return dataclasses.replace(
            predicted,
            feasible=False,
            source="estimate",
            failure="oom",
            reason=reason,
            details=details,
        )

    def close(self) -> None:
        self.inner.close()
        if self.screen is not None:
            self.screen.close()
