"""Monotonicity the estimator must keep, over configs drawn from the default search space."""

import math
from typing import Any

import optuna
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.problem import Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.space import SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)
BATCHES = (2, 4, 8, 16)  # batch-norm cannot train on one value per channel
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def problem(batch: Any = 4) -> Any:
    return Problem("resnet18", batch, input_shape=(3, 32, 32), num_classes=10, ipus=4)


def draw_config(seed: Any, p: Any = None) -> Any:
    p = p or problem()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return SearchSpace.load(p).sample(study.ask(), p, profile_for(p))


def measure(p: Any, c: Any) -> Any:
    return estimate(p, c, profile_for(p))


@given(st.integers(0, 10**6), st.sampled_from(BATCHES), st.sampled_from(BATCHES))
@SETTINGS
def test_more_micro_batch_never_needs_less_memory(seed: Any, a: Any, b: Any) -> None:
    small, large = problem(min(a, b)), problem(max(a, b))
    c = draw_config(seed, small)
    for x, y in zip(
        measure(small, c).required_bytes, measure(large, c).required_bytes, strict=True
    ):
        assert y >= x


@given(st.integers(0, 10**6))
@SETTINGS
def test_fp16_never_needs_more_than_fp32(seed: Any) -> None:
    p = problem()
    c = draw_config(seed)
    fp32 = c.replace(
        precision="32.32", partials="float", loss_scaling=1.0, stochastic_rounding=False
    )
    fp16 = fp32.replace(precision="16.16")
    for h, f in zip(measure(p, fp16).required_bytes, measure(p, fp32).required_bytes, strict=True):
        assert h <= f


@given(st.integers(0, 10**6))
@SETTINGS
def test_offload_and_sharding_never_add_on_chip_memory(seed: Any) -> None:
    p = problem()
    c = draw_config(seed).replace(optimizer_offload=False, replicated_tensor_sharding=False)
    base = measure(p, c).required_bytes
    assert all(
        x <= y
        for x, y in zip(
            measure(p, c.replace(optimizer_offload=True)).required_bytes, base, strict=True
        )
    )
    if c.replicas > 1:
        sharded = measure(p, c.replace(replicated_tensor_sharding=True)).required_bytes
        assert all(x <= y for x, y in zip(sharded, base, strict=True))


@given(st.integers(0, 10**6), st.floats(0.05, 1.0), st.floats(0.05, 1.0))
@SETTINGS
def test_lower_amp_never_makes_a_step_faster(seed: Any, a: Any, b: Any) -> None:
    p = problem()
    c = draw_config(seed)
    lo, hi = min(a, b), max(a, b)
    slow = measure(p, c.replace(available_memory_proportion=(lo,) * c.ipus_per_replica))
    fast = measure(p, c.replace(available_memory_proportion=(hi,) * c.ipus_per_replica))
    assert slow.step_time_s >= fast.step_time_s


@given(st.integers(0, 10**6))
@SETTINGS
def test_estimates_are_finite_and_non_negative(seed: Any) -> None:
    p = problem()
    c = draw_config(seed)
    assert violations(p, c, profile_for(p).module_order) == []
    m = measure(p, c)
    assert m.throughput > 0 and math.isfinite(m.throughput) and m.step_time_s > 0
    assert all(v >= 0 for bd in m.breakdown for v in bd.values())
    assert m.overflow_bytes >= 0 and (m.overflow_bytes == 0) == m.feasible


def test_overflow_is_reported_per_busiest_tile() -> None:
    p = Problem("resnet50", 64, input_shape=(3, 224, 224), ipus=1)
    m = measure(
        p,
        draw_config(0, p).replace(
            precision="32.32",
            ipus_per_replica=1,
            replicas=1,
            splits=(),
            recompute="none",
            checkpoints=(),
            available_memory_proportion=(0.6,),
            optimizer_offload=False,
            replicated_tensor_sharding=False,
            execution="pipelined",
            io_tiles=0,
        ),
    )
    assert not m.feasible and m.failure == "oom"
    assert m.max_tile_bytes[0] > m.tile_capacity_bytes
    assert m.verdict().startswith("OOM by ") and m.verdict().endswith("on IPU0")
    assert m.violation == pytest.approx(m.max_tile_bytes[0] / m.tile_capacity_bytes - 1)
