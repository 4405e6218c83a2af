"""Every published point in calibration/points.toml is a test of the estimator."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.problem import Config, Problem
from ipu_autotune.rules import violations
from ipu_autotune.models.trace import profile_for

POINTS = tomllib.loads((Path(__file__).parent / "calibration" / "points.toml").read_text())["point"]
backend = EstimateBackend()


def _cases(key):
    """Points with `key`; a point with `known_miss` is expected to fail, for that reason."""
    return [pytest.param(p, id=p["id"], marks=pytest.mark.xfail(strict=True, reason=p["known_miss"]))
            if "known_miss" in p else pytest.param(p, id=p["id"]) for p in POINTS if key in p]


def load(point):
    return Problem.from_dict(point["problem"]), Config.from_dict(point["config"])


@pytest.mark.parametrize("point", POINTS, ids=[p["id"] for p in POINTS])
def test_point_is_a_valid_config(point):
    problem, config = load(point)
    assert violations(problem, config, profile_for(problem).module_order) == []


@pytest.mark.parametrize("point", _cases("expect"))
def test_memory_verdict(point):
    problem, config = load(point)
    m = backend.measure(problem, config)
    assert m.feasible == (point["expect"] == "fits"), m.verdict()


@pytest.mark.parametrize("point", _cases("throughput"))
def test_throughput_within_published_band(point):
    problem, config = load(point)
    m = backend.measure(problem, config)
    ratio = m.throughput / point["throughput"]
    low, high = point.get("band", (0.7, 1.4))
    assert low <= ratio <= high, f"estimated {m.throughput:.0f}/s is {ratio:.2f}x the published figure"


@pytest.mark.parametrize("point", [p for p in POINTS if "relative" in p], ids=lambda p: p["id"])
def test_fp16_over_fp32_memory_ratio(point):
    problem, config = load(point)
    rel = point["relative"]
    assert rel["metric"] == "required_bytes(16.16) / required_bytes(32.32)"
    fp32 = config.replace(precision="32.32", optimizer_state="float", loss_scaling=1.0, stochastic_rounding=False)
    half = sum(backend.measure(problem, config).required_bytes)
    full = sum(backend.measure(problem, fp32).required_bytes)
    assert abs(half / full - rel["value"]) <= rel["tolerance"], f"ratio {half / full:.3f}"


def test_hand_tuned_workshop_config_is_faster_than_its_start():
    """The workshop's own story: GA 8, DI 4 and 8-bit I/O speed up the FP16 config."""
    by_id = {p["id"]: load(p) for p in POINTS}
    start = backend.measure(*by_id["seed-fp16"])
    tuned = backend.measure(*by_id["seed-fp16-ga8-di4-8bit"])
    assert tuned.throughput > 1.1 * start.throughput


def test_mt5_runs_out_of_memory_on_the_embedding_and_head_ipus():
    """M21: optimum's mT5 notebook layout [0, 8, 8, 0] overflows IPU0 and IPU3 only, where the
    untied 250112x512 embedding and LM head keep 8 B of AdamW state per parameter each."""
    problem, config = load(next(p for p in POINTS if p["id"] == "M21"))
    m = backend.measure(problem, config)
    over = [i for i, t in enumerate(m.max_tile_bytes) if t > m.tile_capacity_bytes]
    assert over == [0, 3]
