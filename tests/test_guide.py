"""The guide learns how far compiles differ from the estimator and proposes configs that fit."""

from dataclasses import replace

import optuna
import pytest

from ipu_autotune.backends.base import Backend
from ipu_autotune.backends.estimate import estimate
from ipu_autotune.backends.estimate.constants import NOMINAL
from ipu_autotune.guide import Guide, memory_correction
from ipu_autotune.models.trace import profile_for
from ipu_autotune.problem import Problem
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.runner import Runner
from ipu_autotune.study import create_sampler, enqueue
from ipu_autotune.warmstart import naive_baseline, proposals

PROBLEM = Problem("resnet50", 16, input_shape=(3, 224, 224), ipus=4, optimizer="sgd")
HIDDEN = replace(NOMINAL, tile_imbalance=NOMINAL.tile_imbalance * 1.25)  # the "real" IPU needs 25% more


class HiddenIPU(Backend):
    """Compiles on an IPU the estimator does not know exactly."""

    name, source = "hidden", "compile"

    def measure(self, problem, config):
        m = estimate(problem, config, profile_for(problem), HIDDEN)
        m.source = "compile"
        return m


def test_correction_is_the_measured_over_estimated_tile_ratio():
    profile = profile_for(PROBLEM)
    config = naive_baseline(PROBLEM, profile)
    measured = [(config, HiddenIPU().measure(PROBLEM, config))]
    assert memory_correction(PROBLEM, profile, measured, NOMINAL) == pytest.approx(1.25, rel=1e-3)
    # Estimates teach nothing: they are the model itself.
    assert memory_correction(PROBLEM, profile, [(config, estimate(PROBLEM, config, profile))], NOMINAL) == 1.0


def test_guided_trials_fit_on_the_hidden_ipu():
    profile = profile_for(PROBLEM)
    space = SearchSpace.load(PROBLEM)
    study = optuna.create_study(direction="maximize", sampler=create_sampler(0))
    enqueue(study, space, PROBLEM, profile, proposals(PROBLEM, profile, space, naive_baseline(PROBLEM, profile),
                                                       headroom=0.05))
    runner = Runner(study, PROBLEM, profile, space, HiddenIPU(), guide=Guide(PROBLEM, profile, space, 0.05))
    done = runner.run(16)
    guided = [r for r in done if r.origin.startswith("guided")]
    assert guided, "the guide proposed nothing"
    assert all(r.measurement.feasible for r in guided)
    assert runner.guide.correction == pytest.approx(1.25, rel=1e-3)
    # No configuration is compiled twice.
    assert len({r.config for r in done}) == len(done)


def test_the_guides_climb_sees_the_corrected_model():
    """The climb walks CorrectedScreen: its answers must be the corrected ones, not the nominal
    estimate (a misplaced method once left the climb on the uncorrected model)."""
    from ipu_autotune.search.corrected import CorrectedModel, CorrectedScreen, observe
    from ipu_autotune.warmstart import Screen

    profile = profile_for(PROBLEM)
    space = SearchSpace.load(PROBLEM)
    screen = Screen(PROBLEM, profile, NOMINAL, 0.0, None, space)
    config = naive_baseline(PROBLEM, profile)
    model = CorrectedModel(screen, observe(screen, [(config, HiddenIPU().measure(PROBLEM, config))]), 0.05)
    seen = CorrectedScreen(model)(config)
    fits, throughput, load, fraction = model.judge(config)
    assert seen.throughput == throughput and seen.feasible == fits
    # 25 % more memory than the nominal estimate says (plus the margin): the corrected answer shows it.
    nominal = max(screen(config).max_tile_bytes)
    assert 1.25 * nominal * 0.999 <= max(seen.max_tile_bytes) <= 1.25 * nominal * 1.02
