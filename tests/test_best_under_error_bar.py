"""The best is chosen under the error bar (issue 43): with the estimate backend a configuration
fits only when its chance to fit by the calibrated memory band is at least --fit-confidence;
a faster one the bar leaves uncertain is named as the alternative, with its chance."""

from __future__ import annotations

import optuna
import pytest
from testing import RESNET50_4IPU_SGD, not_none

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.backends.estimate.error_bars import (
    MEMORY_SCALE,
    confident_fraction,
    family,
    fit_chance,
    kept_free,
)
from ipu_autotune.guide.proposal import Proposal
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.present import intervals
from ipu_autotune.problem import Config
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study.records import (
    best_record,
    create_sampler,
    enqueue,
    records,
    uncertain_alternative,
)
from ipu_autotune.study.runner import Runner

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("model", ["resnet101", "hf:gpt2"])
def test_the_chance_to_fit_falls_across_the_band_and_meets_the_confidence_at_its_limit(
    model: str,
) -> None:
    low, high = MEMORY_SCALE.get(family(model), MEMORY_SCALE["all"])
    assert fit_chance(model, 1 / high) == pytest.approx(1.0)  # fits at the band's worst factor
    assert fit_chance(model, 1 / low) == pytest.approx(0.0)  # over even at its best
    fractions = [0.5, 0.8, 0.9, 1.0, 1.1, 1.5]
    chances = [fit_chance(model, f) for f in fractions]
    assert chances == sorted(chances, reverse=True)
    for confidence in (0.5, 0.9, 0.99):
        assert fit_chance(model, confident_fraction(model, confidence)) == pytest.approx(
            confidence
        )
        for exact in (0.3, 0.7):  # the exact share is not widened: more of the tile may be used
            assert fit_chance(
                model, confident_fraction(model, confidence, exact), exact
            ) == pytest.approx(confidence)
    assert confident_fraction(model, 0.9, 0.5) > confident_fraction(
        model, 0.9
    )  # 0.9 keeps some of a tile free
    # the band acts on the uncertain part only; an exact share over a tile fits under no factor
    assert fit_chance(model, 0.9, 0.6) > fit_chance(model, 0.9)
    assert fit_chance(model, 1.2, 1.01) == 0.0 and fit_chance(model, 0.95, 0.95) == 1.0
    assert kept_free(model, 0.05, None) == 0.05
    assert kept_free(model, 0.05, 0.9) == max(0.05, 1 - confident_fraction(model, 0.9))


@pytest.mark.slow
def test_a_straddling_candidate_is_not_the_best_when_one_fits_and_is_named_the_alternative() -> (
    None
):
    problem = RESNET50_4IPU_SGD
    profile, space = profile_for(problem), SearchSpace.load(problem)
    baseline = naive_baseline(problem, profile)
    backend = EstimateBackend(headroom=0.05, fit_confidence=0.9)
    # the warm starts climbed to the confident limit, and the ones climbed with no margin at all
    confident = proposals(
        problem, profile, space, baseline, headroom=kept_free(problem.model, 0.05, 0.9)
    )
    loose = proposals(problem, profile, space, baseline, headroom=0.0)

    def speed(c: Config) -> float:
        return not_none(backend.measure(problem, c).throughput)

    def chance(c: Config) -> float:
        return not_none(backend.measure(problem, c).fit_chance)  # the backend is asked for it

    fits = max(
        (p.config for p in confident if backend.measure(problem, p.config).feasible), key=speed
    )
    fast = speed(fits)
    straddling = [p.config for p in loose if 0 < chance(p.config) < 0.9 and speed(p.config) > fast]
    assert straddling, "the loose climbs should reach past the confident limit"
    faster = straddling[0]
    # the case in point: the nominal estimate puts it inside a tile, the bar straddles the limit
    assert EstimateBackend().measure(problem, faster).feasible
    assert backend.measure(problem, faster).straddles_tile_limit

    study = optuna.create_study(direction="maximize", sampler=create_sampler(0))
    enqueue(
        study, space, problem, profile, [Proposal(faster, "straddles"), Proposal(fits, "fits")]
    )
    runner = Runner(study, problem, profile, space, backend)
    runner.run_one(), runner.run_one()
    recs = records(study)
    best = not_none(best_record(study))
    assert best.config == fits and not_none(best.measurement.fit_chance) >= 0.9
    alternative = uncertain_alternative(recs, best)
    assert alternative is not None and alternative.config == faster
    m = alternative.measurement
    assert not m.feasible and "chance to fit by the error bar" in m.reason
    line = intervals.alternative_line(best.measurement, alternative.number, m)
    assert f"a {m.fit_chance:.0%} chance to fit" in line and "under the 90% asked" in line
    assert f"{not_none(m.throughput) / not_none(best.measurement.throughput):.2f}x" in line
    # asked for less confidence, the same straddler counts as fitting
    relaxed = EstimateBackend(headroom=0.0, fit_confidence=not_none(m.fit_chance) - 0.01).measure(
        problem, faster
    )
    assert relaxed.feasible
