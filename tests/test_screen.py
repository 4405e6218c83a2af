"""ScreenedBackend: far-over-capacity candidates skip the compile; near ones are compiled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest_fake_sdk import SMALL_CNN, fake_env
from testing import SMALL_CNN_CIFAR as PROBLEM

from ipu_autotune.backends.base import Backend, Measurement, failed
from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.backends.poptorch import PopTorchBackend
from ipu_autotune.backends.screen import ScreenedBackend
from ipu_autotune.problem import Config, Problem

TILE = 638_976


class Fixed(Backend):
    """Returns a prepared Measurement and counts calls."""

    def __init__(self, m: Measurement | None = None, error: Exception | None = None) -> None:
        self.m, self.error, self.calls = m, error, 0

    def measure(self, problem: Any, config: Any) -> Any:
        self.calls += 1
        if self.error:
            raise self.error
        return self.m


def predicted(fraction_of_tile: float) -> Measurement:
    """An estimate whose busiest tile is at `fraction_of_tile` of capacity."""
    busiest = int(TILE * fraction_of_tile)
    return Measurement(
        feasible=busiest <= TILE,
        source="estimate",
        required_bytes=[busiest * 1000],
        capacity_bytes=[TILE * 1472],
        max_tile_bytes=[busiest],
        tile_capacity_bytes=TILE,
        failure=None if busiest <= TILE else "oom",
        reason="estimated",
    )


def compiled() -> Measurement:
    return Measurement(feasible=True, source="compile")


def test_far_over_capacity_is_not_compiled() -> None:
    inner = Fixed(compiled())
    screened = ScreenedBackend(inner, Fixed(predicted(1.6)), margin=0.25)
    m = screened.measure(PROBLEM, Config())
    assert (m.feasible, m.failure, m.source) == (False, "oom", "estimate")
    assert m.details["screened"] and "not compiled" in m.reason and "60%" in m.reason
    assert m.max_tile_bytes == [int(TILE * 1.6)]  # the estimate's memory, for the sampler
    assert inner.calls == 0 and (screened.compiles_saved, screened.compiles_run) == (1, 0)


@pytest.mark.parametrize("fraction", [0.5, 1.0, 1.2])
def test_within_the_margin_is_compiled(fraction: float) -> None:
    result = compiled()
    inner = Fixed(result)
    screened = ScreenedBackend(inner, Fixed(predicted(fraction)), margin=0.25)
    assert screened.measure(PROBLEM, Config()) is result
    assert inner.calls == 1 and (screened.compiles_saved, screened.compiles_run) == (0, 1)
    assert result.details["screen_violation"] == pytest.approx(fraction - 1, abs=1e-3)


@pytest.mark.parametrize(
    "fraction, veto", [(1.6, None), (1.2, None), (1.2, "the store says 40% over"), (0.5, None)]
)
def test_would_compile_answers_as_measure_does_without_compiling(
    fraction: float, veto: str | None
) -> None:
    """The guide asks first (guide/untried.py): the answer must be measure's, and asking
    must neither compile nor count a compile saved."""
    inner = Fixed(compiled())
    asked = ScreenedBackend(inner, Fixed(predicted(fraction)), margin=0.25)
    asked.veto = lambda config: veto
    answer = asked.would_compile(PROBLEM, Config())
    assert (inner.calls, asked.compiles_saved, asked.compiles_run) == (0, 0, 0)
    assert answer == (asked.measure(PROBLEM, Config()).source == "compile")
    assert answer == (fraction <= 1.25 and veto is None)
    assert Fixed().would_compile(
        PROBLEM, Config()
    )  # a backend without a screen compiles everything


def test_a_compile_without_timing_gets_the_estimated_throughput() -> None:
    estimate = predicted(0.8)
    estimate.throughput, estimate.step_time_s = 1234.0, 0.05
    result = compiled()
    m = ScreenedBackend(Fixed(result), Fixed(estimate)).measure(PROBLEM, Config())
    assert (m.source, m.throughput, m.step_time_s) == ("compile", 1234.0, 0.05)
    assert m.details["throughput_source"] == "estimate"
    timed = Measurement(feasible=True, source="run", throughput=99.0)
    assert (
        ScreenedBackend(Fixed(timed), Fixed(estimate)).measure(PROBLEM, Config()).throughput
        == 99.0
    )
    off = ScreenedBackend(Fixed(compiled()), Fixed(estimate), estimate_missing_throughput=False)
    assert off.measure(PROBLEM, Config()).throughput is None


def test_margin_zero_screens_every_predicted_oom_and_none_screens_nothing() -> None:
    strict = ScreenedBackend(Fixed(compiled()), Fixed(predicted(1.01)), margin=0.0)
    assert strict.measure(PROBLEM, Config()).source == "estimate"
    result = compiled()
    off = ScreenedBackend(Fixed(result), None)
    assert off.measure(PROBLEM, Config()) is result and off.compiles_run == 1
    assert "screen_violation" not in result.details
    with pytest.raises(ValueError):
        ScreenedBackend(Fixed(result), None, margin=-0.1)


def test_a_screen_that_cannot_judge_lets_the_compile_decide() -> None:
    result = compiled()
    broken = ScreenedBackend(Fixed(result), Fixed(error=RuntimeError("trace failed")))
    assert broken.measure(PROBLEM, Config()) is result and broken.screen_errors == 1
    result = compiled()
    not_memory = ScreenedBackend(Fixed(result), Fixed(failed("invalid", "bad", source="estimate")))
    assert not_memory.measure(PROBLEM, Config()) is result  # only memory verdicts veto


def largest_estimated_fit() -> Problem:
    def at(batch: int) -> Problem:
        return Problem(model=SMALL_CNN, batch_size=batch, input_shape=(3, 32, 32), num_classes=10)

    lo, hi = 8, 4096
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if EstimateBackend().measure(at(mid), Config()).feasible else (lo, mid)
    return at(lo)


@pytest.mark.slow
def test_screening_in_front_of_the_poptorch_backend(tmp_path: Path) -> None:
    """Far over: no trial directory at all. Near the line: compiled, and the compile decides."""
    backend = ScreenedBackend(
        PopTorchBackend(tmp_path, env=fake_env(), timeout_s=120), EstimateBackend(), margin=0.25
    )
    far = Problem(model=SMALL_CNN, batch_size=4096, input_shape=(3, 32, 32), num_classes=10)
    m = backend.measure(far, Config())
    assert (m.source, m.failure) == ("estimate", "oom")
    assert not list(tmp_path.glob("trial-*"))

    # The largest micro-batch the estimator says fits: right at the line, so it is compiled,
    # and the fake hardware (skewed constants, stricter than nominal) says OOM.
    near = largest_estimated_fit()
    assert EstimateBackend().measure(near, Config()).feasible
    m = backend.measure(near, Config())
    assert (m.source, m.failure) == ("compile", "oom")  # compiled: the screen passed it
    assert [p.name for p in tmp_path.glob("trial-*")] == ["trial-0001"]
    assert (backend.compiles_saved, backend.compiles_run) == (1, 1)
