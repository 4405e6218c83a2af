"""`ipu-autotune verify` (issue 44): the FP16 emulation, the recipe as the export writes it, and
the verdict on scikit-learn's bundled digits, for the tuner's recipe and three broken ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from testing import not_none

pytest.importorskip("sklearn")

import ipu_autotune
from ipu_autotune import cli
from ipu_autotune.export import python as export_python
from ipu_autotune.models.zoo import build_model
from ipu_autotune.problem import Config, Problem
from ipu_autotune.verification import emulation, recipe as verify_recipe
from ipu_autotune.verification.check import plan, run_check
from ipu_autotune.verification.samples import read_samples
from ipu_autotune.verification.verdict import EXIT_FAILED_CHECK

DIGITS = "verify_models:digits"
SHAPE = ["--input-shape", "1,8,8", "--num-classes", "10"]


def check(
    model: str,
    optimizer: str,
    baseline: Config,
    tuned: Config,
    steps: int,
    lr: float | None = None,
) -> Any:
    problem = Problem(model, 16, input_shape=(1, 8, 8), num_classes=10, optimizer=optimizer)
    the_plan = plan(problem, baseline, tuned, steps=steps, lr=lr)
    samples = read_samples(DIGITS, the_plan.samples)
    return run_check(lambda: build_model(model, 10, device="cpu"), the_plan, samples)


# --- the emulation ---------------------------------------------------------------------------


def test_stochastic_rounding_lands_on_the_two_neighbours_and_is_unbiased() -> None:
    ulp = 2.0**-10  # FP16's step in [1, 2)
    x = torch.full((200_000,), 1.0 + 0.25 * ulp)
    r = emulation.stochastic_fp16(x, torch.Generator().manual_seed(0))
    assert set(r.unique().tolist()) == {1.0, 1.0 + ulp}
    assert abs(float(r.mean()) - float(x[0])) < 0.02 * ulp
    assert float((r > 1).float().mean()) == pytest.approx(0.25, abs=0.01)
    # round-to-nearest drops the same update every time
    assert emulation.to_fp16(x).unique().tolist() == [1.0]
    # subnormals: steps of 2^-24
    tiny = torch.full((100_000,), 1.5 * 2.0**-24)
    assert set(
        emulation.stochastic_fp16(tiny, torch.Generator().manual_seed(1)).unique().tolist()
    ) == {2.0**-24, 2.0**-23}


def test_the_recipe_is_the_exports_learning_rate_and_loss_scale() -> None:
    problem = Problem("resnet18", 16, optimizer="sgd")
    tuned = Config(
        precision="16.16",
        gradient_accumulation=8,
        replicas=2,
        loss_scaling="auto",
        stochastic_rounding=True,
        optimizer_state="half",
    )
    r = verify_recipe.recipe_for(problem, tuned, "tuned", base_global_batch=16)
    lr_text, _ = export_python.learning_rate(problem, tuned, 16)
    assert r.global_batch == 256 and r.lr == float(lr_text) == pytest.approx(0.01 * 16)
    assert r.loss_scale == export_python.ALS_INITIAL_SCALE and r.auto_loss_scale and r.half_state
    assert any("automatic loss scaling" in n for n in r.not_emulated())
    half = verify_recipe.recipe_for(problem, Config(precision="16.16", partials="half"), "t")
    assert any("half partials" in n for n in half.not_emulated())


# --- must show 1: the tuner's recipe at parity, broken recipes caught ---------------------------


@pytest.mark.slow
def test_the_tuners_fp16_recipe_is_at_parity_on_digits(tmp_path: Path) -> None:
    """tune (estimator, FP16 required by the space) picks the precision, loss scale, stochastic
    rounding, global batch and learning rate; verify trains it beside the baseline."""
    space = tmp_path / "space.toml"
    space.write_text('[knobs]\nprecision = ["16.16"]\n')
    storage = f"sqlite:///{tmp_path / 's.db'}"
    result = ipu_autotune.tune(
        "verify_models:digits_net",
        batch_size=16,
        input_shape=(1, 8, 8),
        num_classes=10,
        optimizer="adamw",
        max_global_batch=64,
        trials=8,
        space=str(space),
        backend="estimate",
        storage=storage,
        study="digits",
        out=str(tmp_path / "out"),
        quiet=True,
        data=DIGITS,
        verify=True,
    )
    verdict = not_none(result.verdict)  # tune --verify: K = 200 steps of the best recipe
    tuned, best = verdict.tuned, not_none(result.best_config)
    assert best.precision == "16.16" and best.stochastic_rounding and best.loss_scaling != 1.0
    assert tuned.recipe.startswith("16.16") and f"loss scale {best.loss_scaling:g}" in tuned.recipe
    assert verdict.kind == "at parity", verdict.line()
    assert tuned.overflow == 0 and tuned.nonfinite_at is None
    report = cli.main(
        ["report", "--storage", storage, "--study", "digits", "-o", str(tmp_path / "r.html")]
    )
    assert report == 0
    html = (tmp_path / "r.html").read_text()
    assert "Training check" in html and "at parity" in html
    # verify --study reads the same pair back from the storage
    again = ipu_autotune.verify(study="digits", storage=storage, data=DIGITS, steps=20, quiet=True)
    again = not_none(again)
    assert again.tuned.recipe == tuned.recipe and again.runs[0].recipe == verdict.runs[0].recipe


@pytest.mark.slow
def test_fp16_gradients_without_loss_scaling_underflow_and_stall() -> None:
    verdict = check(
        "verify_models:vanishing_net", "adam", Config(), Config(precision="16.32"), 400, lr=1e-4
    )
    assert verdict.tuned.underflow_fraction > 0.1
    assert verdict.kind in ("stalled", "lags"), verdict.line()
    assert "underflowed" in verdict.line()


@pytest.mark.slow
def test_fp16_weights_without_stochastic_rounding_stall_below_half_an_ulp() -> None:
    off = check(
        "verify_models:large_weight_classifier",
        "adam",
        Config(),
        Config(precision="16.16"),
        600,
        lr=5e-5,
    )
    assert off.kind == "stalled", off.line()
    assert off.tuned.lost_update_fraction > 0.99
    on = check(
        "verify_models:large_weight_classifier",
        "adam",
        Config(),
        Config(precision="16.16", stochastic_rounding=True),
        600,
        lr=5e-5,
    )
    assert on.kind == "at parity", on.line()


def test_global_batch_32x_with_the_linear_rule_diverges() -> None:
    verdict = ipu_autotune.verify(
        "verify_models:digits_net",
        batch_size=16,
        input_shape=(1, 8, 8),
        num_classes=10,
        optimizer="sgd",
        lr=0.1,
        tuned=Config(gradient_accumulation=32),
        data=DIGITS,
        steps=10,
        quiet=True,
    )
    assert verdict.tuned.recipe.startswith(
        "32.32, micro-batch 16 x 32 x 1 = global batch 512, sgd lr 3.2"
    )
    assert verdict.kind == "diverged", verdict.line()
    assert verdict.exit_code == EXIT_FAILED_CHECK


# --- must show 2: the numerics advice and the run agree ---------------------------------------


@pytest.mark.slow
def test_the_advised_loss_scale_keeps_the_runs_gradients() -> None:
    from ipu_autotune.numerics.advice import advise

    problem = Problem(
        "verify_models:shallow_vanishing_net",
        16,
        input_shape=(1, 8, 8),
        num_classes=10,
        optimizer="adam",
    )
    advice = advise(problem, lr=1e-4, steps=3, data=DIGITS)
    # the smallest scale numerics says keeps 99.99 % of the gradients representable, without
    # overflow
    scale = min(r.scale for r in advice.table if r.flushed <= 1e-4 and not r.overflow)
    at_1 = next(r for r in advice.table if r.scale == 1.0)
    assert at_1.flushed > 0.01  # and scale 1 loses some
    scaled = check(
        problem.model,
        "adam",
        Config(),
        Config(precision="16.32", loss_scaling=scale),
        400,
        lr=1e-4,
    )
    assert scaled.tuned.underflow_fraction < 1e-3
    # at scale 1, over numerics' own 3 steps: the run flushes to zero what numerics counts lost
    # (numerics also counts [2^-25, 2^-24), which rounds up to 2^-24, hence the run's lower share)
    short = check(problem.model, "adam", Config(), Config(precision="16.32"), 3, lr=1e-4)
    assert at_1.flushed / 4 < short.tuned.underflow_fraction <= at_1.flushed
    assert scaled.tuned.overflow == 0


# --- the command ------------------------------------------------------------------------------


def test_verify_command_exit_codes_json_and_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tuned = tmp_path / "tuned.toml"
    tuned.write_text("[config]\ngradient_accumulation = 32\n")
    args = [
        "verify",
        "verify_models:digits_net",
        "-b",
        "16",
        *SHAPE,
        "--optimizer",
        "sgd",
        "--lr",
        "0.1",
        "--data",
        DIGITS,
        "--tuned",
        str(tuned),
        "--steps",
        "10",
    ]
    assert cli.main([*args, "--json"]) == EXIT_FAILED_CHECK
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "diverged" and len(out["runs"]) == 3
    assert cli.main([a for a in args if a not in ("--data", DIGITS)]) == 2
    assert "needs --data" in capsys.readouterr().err
    assert cli.main([*args, "--study", "x"]) == 2
    assert cli.main([*args, "--samples", "100"]) == 2  # less than one update of 512
    assert "raise it" in capsys.readouterr().err


def test_tune_verify_without_data_is_refused_before_any_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    code = cli.main(
        [
            "tune",
            "verify_models:digits_net",
            "-b",
            "16",
            *SHAPE,
            "--verify",
            "--backend",
            "estimate",
            "--storage",
            f"sqlite:///{db}",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 2 and "--verify needs --data" in capsys.readouterr().err
    assert not db.exists()
