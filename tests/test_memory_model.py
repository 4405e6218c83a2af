"""The learnt memory model: a fixed and a proportional part per tile, and a chance to fit."""

import random
from statistics import NormalDist

import pytest

from ipu_autotune.backends.base import CATEGORIES
from ipu_autotune.backends.estimate import estimate
from ipu_autotune.guide.proposals import memory_correction
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.problem import Problem
from ipu_autotune.guide.corrected import layout
from ipu_autotune.guide.memory_model import MemoryModel, MemoryPoint, memory_points
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.guide.warmstart import Screen, naive_baseline, proposals

PROBLEM = Problem("resnet50", 16, input_shape=(3, 224, 224), ipus=4, optimizer="sgd")
FIXED = 0.12  # of a tile: a per-tile cost the estimator lacks (code, exchange buffers)


def compiled_on_fixed_cost_ipu(problem, configs):
    """(config, Measurement) as an IPU that adds FIXED of a tile to every tile would report."""
    profile = profile_for(problem)
    out = []
    for c in configs:
        m = estimate(problem, c, profile)
        cap = m.tile_capacity_bytes
        m.max_tile_bytes = [int(t + FIXED * cap) for t in m.max_tile_bytes]
        m.feasible = max(m.max_tile_bytes) <= cap
        m.failure, m.source = None if m.feasible else "oom", "compile"
        out.append((c, m))
    return out


def test_a_fixed_per_tile_cost_is_learnt_as_fixed_not_as_a_ratio():
    profile = profile_for(PROBLEM)
    space = SearchSpace.load(PROBLEM)
    baseline = naive_baseline(PROBLEM, profile)
    configs = [baseline] + [p.config for p in proposals(PROBLEM, profile, space, baseline, headroom=0.05)][:2]
    screen = Screen(PROBLEM, profile, space=space)
    measured = compiled_on_fixed_cost_ipu(PROBLEM, configs)
    loads = [t / m.tile_capacity_bytes for _, m in measured for t in estimate(PROBLEM, _, profile).max_tile_bytes]
    assert max(loads) - min(loads) > 0.2  # lightly and heavily loaded IPUs: a ratio cannot fit both

    model = MemoryModel(memory_points(screen, measured, layout))
    fixed, fixed_sd = model.part("fixed")
    proportional, _ = model.part("proportional")
    assert fixed == pytest.approx(FIXED, abs=0.03)
    assert proportional == pytest.approx(1.0, abs=0.06)
    assert fixed_sd < 0.05  # learnt, not the prior's 0.10

    # A candidate's predicted tile is its estimate plus the fixed part, light or heavy alike.
    lay, shares = layout(baseline), (1.0 / len(CATEGORIES),) * len(CATEGORIES)
    for load in (0.3, 0.85):
        mean, sd = model.tile(lay, load, shares)
        assert mean == pytest.approx(load + FIXED, abs=0.03)
        assert sd < 0.06
    # The single multiplier reads the same compiles as a ratio (the largest, from the lightest
    # IPU), and puts a candidate at 0.85 of a tile well over memory.
    ratio = memory_correction(PROBLEM, profile, measured, screen.constants)
    assert 0.85 * ratio > 0.85 + FIXED + 0.05


def test_no_compile_keeps_the_prior():
    model = MemoryModel([])
    assert model.part("fixed") == pytest.approx((0.0, 0.10))
    assert model.part("proportional") == pytest.approx((1.0, 0.30))


def test_chance_to_fit_is_calibrated_on_ipus_drawn_from_the_prior():
    """Of candidates given a chance p to fit, about p fit: IPUs whose fixed and proportional
    parts are drawn at random, four compiles of a two-IPU layout each, candidates anywhere."""
    rng = random.Random(7)
    shares = (1.0 / len(CATEGORIES),) * len(CATEGORIES)
    lay = (2, 1, "pipelined")
    pairs = []
    for _ in range(600):
        fixed, proportional, noise = rng.uniform(0.0, 0.2), rng.uniform(0.8, 1.3), 0.015

        def truth(e):
            return fixed + proportional * e + rng.gauss(0.0, noise)

        points = [MemoryPoint(lay, e, shares, truth(e)) for e in (rng.uniform(0.3, 0.9) for _ in range(8))]
        model = MemoryModel(points)
        for _ in range(10):
            e = rng.uniform(0.5, 1.0)
            mean, sd = model.tile(lay, e, shares)
            chance = NormalDist(mean, sd).cdf(1.0)
            pairs.append((chance, truth(e) <= 1.0))
    for lo, hi in ((0.05, 0.35), (0.35, 0.65), (0.65, 0.95)):
        got = [fit for chance, fit in pairs if lo <= chance < hi]
        assert len(got) >= 100
        predicted = sum(c for c, _ in pairs if lo <= c < hi) / len(got)
        assert abs(sum(got) / len(got) - predicted) < 0.08, (lo, hi, predicted, sum(got) / len(got))
