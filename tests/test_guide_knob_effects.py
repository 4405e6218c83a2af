"""The guide learns how each knob acts on this IPU (issue 41): guide/knob_effects.py."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from testing import RESNET50_4IPU_SGD as PROBLEM, not_none

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.guide.corrected import CorrectedModel, observe
from ipu_autotune.guide.features import Featurizer, split_fractions
from ipu_autotune.guide.guide import Guide, GuideSettings
from ipu_autotune.guide.knob_effects import KnobEffects
from ipu_autotune.guide.proposal import History, Reason
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.problem import Config
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace


def effects(xs: list[tuple[float, float]], ys: list[float]) -> KnobEffects:
    """Two numeric knobs, one coordinate each."""
    return KnobEffects(
        np.array(xs), np.empty((len(xs), 0), dtype=object), ys, [[0], [1]], unit=0.05, noise=0.01
    )


def test_a_knob_the_compiles_moved_is_learnt_and_one_they_did_not_keeps_its_spread() -> None:
    def peak(x: float) -> float:  # the true effect of knob 0
        return -3.0 * (x - 0.4) ** 2

    xs = [(x, 0.5) for x in (0.1, 0.3, 0.5, 0.7, 0.9)]
    model = effects(xs, [peak(x) for x, _ in xs])
    mean, sd = model.predict(
        np.array([(0.4, 0.5), (0.6, 0.5), (0.4, 0.0)]), np.empty((3, 0), dtype=object)
    )
    assert mean[0] == pytest.approx(peak(0.4), abs=0.03) and mean[1] == pytest.approx(
        peak(0.6), abs=0.03
    )
    assert sd[0] < 0.05 and sd[1] < 0.05
    # knob 0's spread grew to its effect; knob 1 never moved and keeps its prior spread, so at
    # another value of it the model is unsure again
    constant, knob0, knob1, *interactions = np.exp(model.log_spread)
    assert knob0 > 2 * model.unit and knob1 == pytest.approx(model.unit, rel=0.25)
    assert sd[2] > 2 * sd[0]


def test_one_knobs_effect_is_learnt_from_compiles_that_moved_another_too() -> None:
    """Additive: compiles that moved both knobs at once still tell knob 0's effect apart."""

    def truth(a: float, b: float) -> float:
        return -0.3 * a + 0.2 * math.sin(3 * b)

    xs = [(0.2, 0.1), (0.8, 0.3), (0.5, 0.9), (0.9, 0.6), (0.1, 0.7), (0.6, 0.2), (0.3, 0.5)]
    model = effects(xs, [truth(a, b) for a, b in xs])
    probe = [(0.2, 0.5), (0.8, 0.5)]
    mean, _ = model.predict(np.array(probe), np.empty((2, 0), dtype=object))
    assert mean[0] - mean[1] == pytest.approx(truth(0.2, 0.5) - truth(0.8, 0.5), abs=0.06)


class PeakIPU(EstimateBackend):
    """An IPU on which speed peaks at an available memory proportion of 0.4, where the
    estimator says more is faster up to 0.6 and the same beyond."""

    name, source = "peak", "compile"

    @staticmethod
    def factor(config: Any) -> float:
        a = sum(config.available_memory_proportion) / len(config.available_memory_proportion)
        return math.exp(-3.0 * (a - 0.4) ** 2)

    def measure(self, problem: Any, config: Any) -> Any:
        m = super().measure(problem, config)
        g = self.factor(config)
        return replace(
            m,
            source="compile",
            headroom=0.0,
            throughput=m.throughput and m.throughput * g,
            device_throughput=m.device_throughput and m.device_throughput * g,
        )


@pytest.fixture(scope="module")
def peaked() -> Any:
    profile, space = profile_for(PROBLEM), SearchSpace.load(PROBLEM)
    warm = proposals(PROBLEM, profile, space, naive_baseline(PROBLEM, profile), headroom=0.05)
    base = next(
        p.config for p in warm[1:] if EstimateBackend().measure(PROBLEM, p.config).feasible
    )

    def at(a: float) -> Config:
        return base.replace(available_memory_proportion=(a,) * base.ipus_per_replica)

    estimate = EstimateBackend()

    def speed(a: float) -> float:
        return not_none(estimate.measure(PROBLEM, at(a)).throughput)

    # the premise: the estimator says 0.6 is faster than 0.5, and 0.8 no slower than 0.6
    assert speed(0.6) > speed(0.5)
    assert speed(0.8) >= speed(0.6)
    measured = [(at(a), PeakIPU().measure(PROBLEM, at(a))) for a in (0.6, 0.8, 0.95)]
    return profile, space, base, at, measured


@pytest.mark.slow
def test_a_knob_whose_speed_peaks_mid_range_is_learnt_from_three_compiles(peaked: Any) -> None:
    profile, space, base, at, measured = peaked
    guide = Guide(PROBLEM, profile, space, GuideSettings(0.05))
    model = CorrectedModel(guide.screen, observe(guide.screen, measured), 0.05)
    truth = PeakIPU().measure(PROBLEM, at(0.7)).throughput
    nominal = EstimateBackend().measure(PROBLEM, at(0.7)).throughput
    assert abs(nominal / truth - 1) > 0.25  # the estimator is a quarter off between the compiles
    assert not_none(model.judge(at(0.7))).throughput == pytest.approx(
        truth, rel=0.05
    )  # the model is not


@pytest.mark.slow
def test_the_next_proposal_moves_toward_the_peak(peaked: Any) -> None:
    """With the other knobs fixed (a user's space), the proposal after compiles at 0.6, 0.8
    and 0.95 lowers the proportion (this IPU's speed follows the IPUs' mean proportion),
    towards the peak, and is faster there than any compile."""
    profile, space, base, at, measured = peaked
    fixed = {
        k: [getattr(base, k)]
        for k in (
            "precision",
            "partials",
            "stochastic_rounding",
            "loss_scaling",
            "optimizer_state",
            "ipus_per_replica",
            "execution",
            "recompute",
            "optimizer_offload",
            "replicated_tensor_sharding",
            "gradient_accumulation",
            "device_iterations",
            "eight_bit_io",
            "loader_mode",
            "loader_workers",
        )
    }
    fixed["checkpoint_every"] = [0]
    for knob, values in fixed.items():
        space = space.with_knob(knob, values, "test")
    picked = Guide(PROBLEM, profile, space, GuideSettings(0.05)).propose(History.of(measured))
    assert picked is not None and picked.reason is Reason.GAIN and not_none(picked.gain) > 0
    amps = picked.config.available_memory_proportion
    assert sum(amps) / len(amps) < 0.6 and min(amps) < 0.6
    best = max(m.throughput for _, m in measured)
    assert PeakIPU().measure(PROBLEM, picked.config).throughput > best


@pytest.mark.slow
def test_judgements_predicted_together_are_those_predicted_one_by_one(peaked: Any) -> None:
    """CorrectedModel.prefetch predicts a climb's candidates in one call (the cost of a
    proposal is mostly these predictions): each judgement is the one judge gives alone, to
    rounding (one matrix product of many rows sums in another order than one of one row)."""
    profile, space, base, at, measured = peaked
    guide = Guide(PROBLEM, profile, space, GuideSettings(0.05))
    seen = observe(guide.screen, measured)
    candidates = [c for _, c in guide.screen.candidates(space, base)] + [
        at(a) for a in (0.3, 0.45, 0.7)
    ]
    together, alone = (
        CorrectedModel(guide.screen, seen, 0.05),
        CorrectedModel(guide.screen, seen, 0.05),
    )
    together.prefetch(candidates)
    assert (
        len(together.speed_effects._cache) >= len(set(candidates)) - 1
    )  # predicted before any judge
    for c in candidates:
        a, b = together.judge(c), alone.judge(c)
        assert (a is None) == (b is None)
        if a is not None:
            assert b is not None and a.fits == b.fits
            for field in ("throughput", "load", "busiest", "chance", "worth"):
                assert getattr(a, field) == pytest.approx(
                    getattr(b, field), rel=1e-12, abs=1e-15
                ), field


def studies_effects(rows: list[tuple[float, str, float]]) -> KnobEffects:
    """One numeric knob; each row (value, study, residual), '' being this study's."""
    numeric = np.array([(x,) for x, _, _ in rows], dtype=float).reshape(len(rows), 1)
    levels = np.array([(s,) for _, s, _ in rows], dtype=object).reshape(len(rows), 1)
    return KnobEffects(
        numeric, levels, [y for _, _, y in rows], [[0]], unit=0.05, noise=0.01, studies=True
    )


def test_a_knob_effect_other_studies_agree_on_carries_to_a_new_study_before_it_compiles() -> None:
    """Three stored studies saw speed fall along the knob alike: their correlation with a new
    study is learnt high, and the new study expects the fall, sure of it, with no compile."""

    def truth(x: float) -> float:
        return -0.4 * x

    rows = [
        (x, s, truth(x) + offset)
        for s, offset in (("a", 0.02), ("b", -0.03), ("c", 0.0))
        for x in (0.1, 0.4, 0.7, 0.9)
    ]
    model = studies_effects(rows)
    assert model.study_correlation > 0.8
    mean, sd = model.predict(np.array([(0.1,), (0.9,)]), np.array([("",), ("",)], dtype=object))
    assert mean[0] - mean[1] == pytest.approx(truth(0.1) - truth(0.9), abs=0.08)
    alone = studies_effects([])  # no store: the prior alone
    _, prior_sd = alone.predict(np.array([(0.1,), (0.9,)]), np.array([("",), ("",)], dtype=object))
    assert sd[1] < 0.7 * prior_sd[1]


def test_studies_that_disagree_on_a_knob_leave_a_new_study_unsure_of_it() -> None:
    """Stored studies whose knob effects differ in sign: rho is learnt low, and the new study
    neither expects one of their effects nor is sure of the knob."""
    rows = [
        (x, s, sign * 0.4 * x)
        for s, sign in (("a", 1.0), ("b", -1.0), ("c", 1.0), ("d", -1.0))
        for x in (0.1, 0.4, 0.7, 0.9)
    ]
    model = studies_effects(rows)
    agreeing = studies_effects([(x, s, 0.4 * x) for s in "abcd" for x in (0.1, 0.4, 0.7, 0.9)])
    assert model.study_correlation < 0.5 < agreeing.study_correlation
    mean, sd = model.predict(np.array([(0.1,), (0.9,)]), np.array([("",), ("",)], dtype=object))
    assert abs(mean[0] - mean[1]) < 0.1
    _, sure = agreeing.predict(np.array([(0.1,), (0.9,)]), np.array([("",), ("",)], dtype=object))
    assert sd[1] > 1.5 * sure[1]


def test_another_models_splits_are_placed_by_where_they_fall_in_its_ops() -> None:
    """A stored record carries its stages' ops, not the model's execution order: its splits'
    coordinates are the stages' starts as fractions of the ops, where the model's own config
    would have them by its units' places."""
    assert split_fractions([10, 30, 60]) == pytest.approx((0.1, 0.4))
    assert split_fractions([42]) == ()
    units = [f"u{i}" for i in range(10)]
    featurizer = Featurizer(units)
    config = Config(ipus_per_replica=2, splits=("u4",), execution="pipelined")
    own_numeric, own_levels = featurizer(config)
    foreign_numeric, foreign_levels = featurizer.foreign(config, (0.4,))
    assert foreign_numeric == pytest.approx(own_numeric) and foreign_levels == own_levels
    elsewhere, _ = featurizer.foreign(config, (0.7,))
    assert elsewhere != pytest.approx(own_numeric)


def test_a_combination_of_two_knob_values_is_learnt_apart_from_the_other_knobs() -> None:
    """A pair of knob values that is faster only together (neither alone) carries to an
    untried config that shares the pair, whatever its other knobs: the interactions of two
    knobs (issue 58); a config with one of the two values does not inherit it."""
    from itertools import product

    def truth(c: tuple[str, ...]) -> float:
        return 0.5 if c[0] == c[1] == "a" else 0.0

    left_out = [("a", "a", "b", "a"), ("a", "b", "b", "a")]
    rows = [c for c in product("ab", repeat=4) if c not in left_out]
    levels = np.array(rows, dtype=object)
    model = KnobEffects(
        np.empty((len(rows), 0)),
        levels,
        [truth(c) for c in rows],
        [],
        unit=0.05,
        noise=0.01,
        group_unit=0.171,
    )
    mean, _ = model.predict(np.empty((2, 0)), np.array(left_out, dtype=object))
    # (the knobs alone, with an interaction over all of them at once: 0.29 and 0.12)
    assert mean[0] > 0.4 and mean[1] < 0.1


def test_combined_changes_move_two_or_three_knobs_each_a_single_change_repeat_by_seed() -> None:
    import random

    from ipu_autotune.guide.moves import combined_changes
    from ipu_autotune.guide.pairs import changes

    base = Config()
    singles = [
        base.replace(device_iterations=37),
        base.replace(device_iterations=41),
        base.replace(gradient_accumulation=6),
        base.replace(loader_workers=5),
        base.replace(eight_bit_io=not base.eight_bit_io),
    ]
    drawn = combined_changes(base, singles, random.Random("7"), 24)
    assert len(drawn) == 24
    for c in drawn:
        moved = changes(base, c)
        assert 2 <= len(moved) <= 3  # different knobs, each as one of the singles set it
        assert all(any(changes(base, s) == {k: v} for s in singles) for k, v in moved.items())
    assert combined_changes(base, singles, random.Random("7"), 24) == drawn
    assert (
        combined_changes(base, singles[:1], random.Random("7"), 24) == []
    )  # one knob: nothing to combine


def test_the_joint_posterior_agrees_with_the_marginals_and_ties_a_compiled_point_down() -> None:
    """covariance(a, a)'s diagonal is predict's variance; a compile pins its own config (its
    covariance with anything is the noise's order) while two configs near each other and far
    from the compiles stay correlated."""
    xs = [(0.1, 0.5), (0.5, 0.5), (0.9, 0.5)]
    model = effects(xs, [0.1, -0.05, 0.02])
    probe = np.array([(0.5, 0.5), (0.3, 0.0), (0.32, 0.02), (0.3, 0.5)])
    none = np.empty((len(probe), 0), dtype=object)
    cov = model.covariance(probe, none, probe, none)
    _, sd = model.predict(probe, none)
    assert np.allclose(np.sqrt(np.diag(cov)), sd, rtol=1e-6)
    assert np.allclose(cov, cov.T)
    assert np.linalg.eigvalsh(cov).min() > -1e-9
    correlation = cov / np.outer(sd, sd)
    assert sd[0] < 0.5 * sd[1]  # compiled: known to its noise
    assert correlation[1, 2] > 0.9  # two neighbours the compiles did not reach move together
    assert abs(correlation[0, 1]) < correlation[1, 2]
