"""The product, end to end through the console script: the workshop story on the estimator."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import optuna
import pytest
from testing import not_none, run_cli_process

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.problem import Config, Problem

#: the workshop's final configuration, async data loader included (seed-epoch-ga8-di4-8bit-async)
HAND_TUNED = Config(
    precision="16.16",
    optimizer_state="half",
    loss_scaling=1000.0,
    ipus_per_replica=2,
    splits=("layer3.8",),
    gradient_accumulation=8,
    device_iterations=4,
    eight_bit_io=True,
    loader_mode="async",
)
WORKSHOP = Problem("resnet101", 64, input_shape=(3, 64, 64), optimizer="adamw", ipus=2)


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli_process(*args, cwd=cwd, columns=120, check=check)


def tune_json(cwd: Path, *extra: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(
        cli("resnet101", "--batch-size", "64", "--json", "--seed", "0", *extra, cwd=cwd).stdout
    )
    return result


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`ipu-autotune resnet101 --batch-size 64` in an empty folder (with --json to read it)."""
    cwd = tmp_path_factory.mktemp("default")
    return cwd, tune_json(cwd)


@pytest.mark.slow
def test_default_run_escapes_oom_and_beats_the_hand_tuned_config(default_run: Any) -> None:
    cwd, result = default_run
    assert result["backend"] == "estimate" and result["estimated"]
    assert result["trials_run"] == 60
    base, best = result["baseline"], result["best"]
    assert base["trial"] == 0 and base["origin"] == "baseline"
    assert base["measurement"]["feasible"] is False and base["measurement"]["failure"] == "oom"
    assert base["config"]["precision"] == "32.32"  # what a newcomer writes
    assert best["measurement"]["feasible"] is True
    hand_tuned = EstimateBackend().measure(WORKSHOP, HAND_TUNED)
    assert hand_tuned.feasible
    assert best["measurement"]["throughput"] >= 1.2 * not_none(
        hand_tuned.throughput
    )  # both end to end
    # Trainable: one call within an epoch of CIFAR-10, the global batch within the ceiling.
    c = best["config"]
    assert (
        best["measurement"]["samples_per_call"]
        == 64 * c["gradient_accumulation"] * c["replicas"] * c["device_iterations"]
        <= 50_000
    )
    assert 64 * c["gradient_accumulation"] * c["replicas"] <= 2048
    assert (
        best["measurement"]["bottleneck"]
        and result["workshop_reference"]["bottleneck"] == "host input"
    )
    assert result["workshop_reference"]["throughput"] == pytest.approx(hand_tuned.throughput)
    if 64 * c["gradient_accumulation"] * c["replicas"] != 192:
        assert (
            result["learning_rate"]["rule"] == "square root"
            and result["learning_rate"]["base_global_batch"] == 192
        )
    # The storage is the default SQLite file in the working folder, and the study is complete.
    study = optuna.load_study(
        study_name="resnet101-bs64-2ipu-mk2", storage=f"sqlite:///{cwd}/ipu-autotune.db"
    )
    assert len(study.trials) == 60 and study.best_trial.number == best["trial"]
    files = result["files"]
    assert Path(cwd, files["config"]).is_file() and Path(cwd, files["snippet"]).is_file()
    # Numerics advice from the model's own gradients sets loss scale, SR and partials, with
    # reasons.
    advice = result["numerics"]
    assert advice["loss_scale"]["reason"] and advice["stochastic_rounding"]["reason"]
    assert best["config"]["loss_scaling"] == (
        "auto" if advice["loss_scale"]["auto"] else advice["loss_scale"]["scale"]
    )
    assert best["config"]["stochastic_rounding"] == advice["stochastic_rounding"]["recommend"]
    snippet = Path(cwd, files["snippet"]).read_text()
    assert (
        "# Numerics, from the model's own gradients:" in snippet and "# loss scaling " in snippet
    )
    assert sum(1 for _ in Path(cwd, files["trials"]).open()) == 60


@pytest.mark.slow
def test_default_run_json_carries_the_error_bars(default_run: Any) -> None:
    _, result = default_run
    base, best = result["baseline"]["measurement"], result["best"]["measurement"]
    low, high = best["throughput_interval"]
    assert low < best["throughput"] < high
    assert all(
        lo <= t <= hi
        for (lo, hi), t in zip(
            best["max_tile_bytes_interval"], best["max_tile_bytes"], strict=True
        )
    )
    assert base["straddles_tile_limit"] is True  # 108% of a tile, inside the CNN band's reach
    cap = best["tile_capacity_bytes"]  # the best may sit near the line among host-bound ties
    assert best["straddles_tile_limit"] == any(
        lo <= cap < hi for lo, hi in best["max_tile_bytes_interval"]
    )


@pytest.mark.slow
def test_default_summary_names_both_bottlenecks_and_the_rate(
    default_run: Any, tmp_path: Path
) -> None:
    """The human summary (on a copy of the study, so the other tests' trial counts hold)."""
    import shutil

    cwd, _ = default_run
    shutil.copy(cwd / "ipu-autotune.db", tmp_path / "ipu-autotune.db")
    text = cli("resnet101", "--batch-size", "64", "--trials", "1", cwd=tmp_path).stdout
    assert "best: bottleneck " in text and "samples per call" in text
    assert "workshop's final config (16.16, GA 8, DI 4, 8-bit I/O, async loader)" in text
    assert "bottleneck host input" in text and "learning rate: global batch 192 ->" in text
    assert "error bars (docs/estimator.md): best busiest tile IPU0 " in text and "(90%)" in text


@pytest.mark.slow
def test_same_command_resumes_the_study(default_run: Any) -> None:
    cwd, first = default_run
    again = tune_json(cwd, "--trials", "5")
    assert again["trials_run"] == 5 and again["trials_total"] == 65
    study = optuna.load_study(
        study_name="resnet101-bs64-2ipu-mk2", storage=f"sqlite:///{cwd}/ipu-autotune.db"
    )
    assert sorted(t.number for t in study.trials) == list(range(65))
    assert again["best"]["measurement"]["throughput"] >= first["best"]["measurement"]["throughput"]


@pytest.mark.slow
def test_fixed_global_batch_still_fits_and_beats_hand_tuned(tmp_path: Path) -> None:
    result = tune_json(tmp_path, "--global-batch", "512", "--trials", "40")
    best = result["best"]
    c = best["config"]
    assert 64 * c["gradient_accumulation"] * c["replicas"] == 512
    hand_tuned = EstimateBackend().measure(WORKSHOP, HAND_TUNED)
    assert (
        best["measurement"]["feasible"]
        and best["measurement"]["throughput"] > hand_tuned.throughput
    )


@pytest.mark.slow
def test_toml_export_round_trips_through_estimate(default_run: Any) -> None:
    cwd, result = default_run
    out = cwd / "best.toml"
    cli(
        "export",
        "--study",
        "resnet101-bs64-2ipu-mk2",
        "--trial",
        str(result["best"]["trial"]),
        "--format",
        "toml",
        "-o",
        str(out),
        cwd=cwd,
    )
    data = tomllib.loads(out.read_text())
    assert data["config"] == result["best"]["config"]
    measured = json.loads(cli("estimate", "--config", str(out), "--json", cwd=cwd).stdout)
    stored = result["best"]["measurement"]
    for key in (
        "feasible",
        "required_bytes",
        "max_tile_bytes",
        "breakdown",
        "overflow_bytes",
        "source",
    ):
        assert measured[key] == stored[key], key
    assert measured["throughput"] == pytest.approx(stored["throughput"], rel=1e-9)


@pytest.mark.slow
def test_python_export_byte_compiles(default_run: Any) -> None:
    cwd, result = default_run
    snippet = cli("export", "--study", "resnet101-bs64-2ipu-mk2", cwd=cwd).stdout
    compile(snippet, "best_options.py", "exec")
    assert "poptorch.Options()" in snippet and "def make_optimizer" in snippet


@pytest.mark.slow
def test_estimate_json_is_exactly_one_measurement(tmp_path: Path) -> None:
    proc = cli(
        "estimate",
        "resnet101",
        "--batch-size",
        "64",
        "--set",
        "precision=16.16",
        "--set",
        "splits=layer3.8",
        "--set",
        "ipus_per_replica=2",
        "--set",
        "gradient_accumulation=3",
        "--json",
        cwd=tmp_path,
    )
    out = json.loads(proc.stdout)
    expected = {
        "feasible",
        "source",
        "required_bytes",
        "capacity_bytes",
        "max_tile_bytes",
        "breakdown",
        "overflow_bytes",
        "throughput",
        "step_time_s",
        "failure",
        "problem",
        "config",
    }
    assert expected <= set(out)
    assert out["source"] == "estimate" and len(out["required_bytes"]) == 2
    assert set(out["breakdown"][0]) == {
        "weights",
        "optimizer",
        "gradients",
        "activations",
        "stash",
        "temporary",
        "code/exchange",
    }


@pytest.mark.slow
def test_estimate_table_names_consumer_and_suggestions(tmp_path: Path) -> None:
    proc = cli("estimate", "resnet101", "--batch-size", "64", cwd=tmp_path)
    assert "largest consumer:" in proc.stdout
    assert "saves" in proc.stdout and "on IPU" in proc.stdout
    assert "estimated" in proc.stdout


@pytest.mark.slow
def test_help_lists_the_commands(tmp_path: Path) -> None:
    out = cli("--help", cwd=tmp_path).stdout
    for word in ("tune", "estimate", "export", "show", "studies"):
        assert word in out


@pytest.mark.slow
def test_show_and_studies_read_the_storage(default_run: Any) -> None:
    cwd, result = default_run
    shown = json.loads(cli("show", "--study", "resnet101-bs64-2ipu-mk2", "--json", cwd=cwd).stdout)
    assert shown["problem"]["model"] == "resnet101"
    assert shown["trials"][0]["origin"] == "baseline"
    assert shown["best"]["measurement"]["feasible"]
    listed = json.loads(cli("studies", "--json", cwd=cwd).stdout)
    assert [s["study"] for s in listed] == ["resnet101-bs64-2ipu-mk2"]
    assert listed[0]["trials"] >= 60 and listed[0]["model"] == "resnet101"
    table = cli("show", "--study", "resnet101-bs64-2ipu-mk2", cwd=cwd).stdout
    assert "best trial" in table and "fits" in table


@pytest.mark.slow
def test_quiet_prints_one_line(tmp_path: Path) -> None:
    proc = cli("resnet18", "--batch-size", "8", "--trials", "12", "--quiet", cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and "best trial" in lines[0] and "samples/s" in lines[0]


WORKSHOP_START = """\
[problem]
model = "resnet101"
batch_size = 64
input_shape = [3, 64, 64]
optimizer = "adamw"
ipus = 2

[config]
precision = "32.32"
ipus_per_replica = 2
splits = ["layer3.8"]
gradient_accumulation = 3
"""


@pytest.mark.slow
def test_user_baseline_is_trial_zero(tmp_path: Path) -> None:
    (tmp_path / "start.toml").write_text(WORKSHOP_START)
    result = json.loads(
        cli(
            "resnet101",
            "--batch-size",
            "64",
            "--baseline",
            "start.toml",
            "--trials",
            "8",
            "--json",
            cwd=tmp_path,
        ).stdout
    )
    base = result["baseline"]
    assert base["trial"] == 0 and base["config"]["splits"] == ["layer3.8"]
    assert base["measurement"]["failure"] == "oom"  # the workshop's starting point does not fit
    assert result["best"]["measurement"]["feasible"]


@pytest.mark.slow
def test_estimate_reads_the_workshop_file(tmp_path: Path) -> None:
    (tmp_path / "start.toml").write_text(WORKSHOP_START)
    fp32 = json.loads(cli("estimate", "--config", "start.toml", "--json", cwd=tmp_path).stdout)
    # the workshop's FP16 fix: model.half() with half optimizer state (calibration point seed-fp16)
    fp16 = json.loads(
        cli(
            "estimate",
            "--config",
            "start.toml",
            "--set",
            "precision=16.16",
            "--set",
            "optimizer_state=half",
            "--json",
            cwd=tmp_path,
        ).stdout
    )
    # `estimate` gives the estimate's own verdict, by the tile limit, with the chance beside it
    assert (
        not fp32["feasible"]
        and fp16["feasible"]
        and fp16["fit_chance"] >= 0.9
        and fp16["fit_confidence"] is None
    )
    assert fp32["problem"]["input_shape"] == [3, 64, 64] and fp16["config"]["precision"] == "16.16"


@pytest.mark.slow
def test_numerics_advice_yields_to_a_user_space(tmp_path: Path) -> None:
    (tmp_path / "space.toml").write_text('[knobs]\nprecision = "16.16"\npartials = "float"\n')
    result = json.loads(
        cli(
            "resnet18",
            "--batch-size",
            "8",
            "--trials",
            "15",
            "--space",
            "space.toml",
            "--json",
            cwd=tmp_path,
        ).stdout
    )
    assert result["numerics"]["partials"]["recommend"] == "half"  # advice says half is safe...
    shown = json.loads(cli("show", "--study", result["study"], "--json", cwd=tmp_path).stdout)
    sampled = [t["config"] for t in shown["trials"] if t["origin"] == "sampled"]
    assert sampled and all(
        c["partials"] == "float" for c in sampled
    )  # ...but the user fixed float
    scale = result["numerics"]["loss_scale"]
    assert all(c["loss_scaling"] == ("auto" if scale["auto"] else scale["scale"]) for c in sampled)
