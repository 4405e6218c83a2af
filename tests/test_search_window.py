"""The windowed sampler models a bounded slice of the study, and the corrected model learns
the estimator's error config by config."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial
from testing import RESNET50_4IPU_SGD as PROBLEM, not_none

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.guide.corrected import CorrectedModel, observe
from ipu_autotune.guide.warmstart import Screen, naive_baseline
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.window import WindowedTPESampler, windowed
from ipu_autotune.study.records import create_sampler

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _trial(number: int, value: float, feasible: bool = True) -> Any:
    t = create_trial(
        params={"x": 0.5},
        distributions={"x": FloatDistribution(0, 1)},
        value=value,
        system_attrs={"constraints": [-1.0 if feasible else 1.0]},
    )
    t.number = number
    return t


def test_the_window_keeps_the_recent_trials_and_the_best_feasible_ones() -> None:
    trials = [_trial(i, float(i if i != 3 else 999)) for i in range(500)]
    trials[7] = _trial(7, 5000.0, feasible=False)  # infeasible: never kept for its value
    seen = windowed(trials, window=100, keep_best=5)  # all finished (create_trial: COMPLETE)
    numbers = [t.number for t in seen]
    assert numbers[-100:] == list(range(400, 500))
    assert 3 in numbers and 7 not in numbers
    assert len(numbers) == 105 and numbers == sorted(numbers)
    assert [t.number for t in windowed(trials[:50], 100, 5)] == list(
        range(50)
    )  # below the window: all


def test_the_shipped_sampler_is_windowed_and_still_optimises() -> None:
    assert isinstance(create_sampler(0), WindowedTPESampler)
    assert type(create_sampler(0, window=None)) is optuna.samplers.TPESampler
    study = optuna.create_study(
        direction="maximize",
        sampler=WindowedTPESampler(seed=0, window=30, keep_best=5, multivariate=True),
    )
    study.optimize(lambda t: -((t.suggest_float("x", -5, 5) - 2) ** 2), n_trials=80)
    assert study.best_value > -0.1
    assert all(t.state == TrialState.COMPLETE for t in study.trials)


def test_the_correction_is_local_near_a_compile_and_the_mean_far_away() -> None:
    profile = profile_for(PROBLEM)
    screen = Screen(PROBLEM, profile)
    base = naive_baseline(PROBLEM, profile)
    a = base.replace(precision="16.16", partials="half", loss_scaling=1024.0)
    b = base.replace(device_iterations=16)

    # what compiles said: a needs 30% more tile memory and runs 20% slower; b is exact
    class Compiled:
        def __init__(self, config: Any, memory: Any, speed: Any) -> None:
            m = estimate(PROBLEM, config, profile)
            m.source, m.feasible, m.failure = "compile", True, None
            m.max_tile_bytes = [int(x * memory) for x in m.max_tile_bytes]
            m.throughput = m.throughput * speed
            self.m = m

    measured = [(a, Compiled(a, 1.3, 0.8).m), (b, Compiled(b, 1.0, 1.0).m)]
    model = CorrectedModel(screen, observe(screen, measured), headroom=0.05)
    assert sum(getattr(a, f) != getattr(b, f) for f in a.__dataclass_fields__) == 4  # knobs apart
    near_a = a.replace(device_iterations=2)
    for config, memory, speed in ((a, 1.3, 0.8), (b, 1.0, 1.0)):
        j, nominal = not_none(model.judge(config)), not_none(screen(config))
        raw, throughput = j.busiest, j.throughput
        assert raw == pytest.approx(
            max(nominal.max_tile_bytes) * memory / nominal.tile_capacity_bytes, rel=0.05
        )
        assert throughput == pytest.approx(not_none(nominal.throughput) * speed, rel=0.05)
    # One knob from a: mostly like a.
    near = not_none(model.judge(near_a)).throughput / not_none(not_none(screen(near_a)).throughput)
    assert near < 0.85
    assert model.memory_prior == pytest.approx(math.sqrt(1.3), rel=1e-6)
