"""Clear endings and starts: exit code 3 when nothing fits, the resume header, stars over the
whole study, study names, the trial line, one-IPU exports, warm starts, the search spaces' home."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from rich.console import Console
from testing import not_none, run_cli, run_cli_process

from ipu_autotune.backends.base import Measurement
from ipu_autotune.export.python import render_snippet
from ipu_autotune.present import trial_line as tl
from ipu_autotune.present.live_view import TrialTable, TuneView
from ipu_autotune.present.tune_summary import resume_point as _resume_point
from ipu_autotune.problem import Config, Problem
from ipu_autotune.study.records import TrialRecord

REPO = Path(__file__).resolve().parents[1]


# --- exit code 3 ---------------------------------------------------------------------------------

NO_FIT = (
    "resnet50",
    "--batch-size",
    "128",
    "--target",
    "mk1",
    "--ipus",
    "1",
    "--trials",
    "2",
    "--no-numerics",
    "--seed",
    "0",
)


@pytest.mark.slow
def test_nothing_fits_exits_3_with_the_closest_trial_and_what_would_help(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = run_cli_process(*NO_FIT, cwd=tmp_path)
    assert out.returncode == 3, out.stderr[-2000:]
    text = " ".join(out.stdout.split())  # words, whatever the wrapping
    assert "Nothing fits yet." in text
    assert (
        re.search(r"Closest: trial \d+ \(", text)
        and "it lacks memory: the busiest tile of IPU0 needs" in text
    )
    assert "What would help most" in text
    assert "--ipus " in text and "--batch-size " in text and "(estimated)" in text
    # The JSON form says the same, for scripts (in this process: the exit code is main's).
    monkeypatch.chdir(tmp_path)
    code, stdout, err = run_cli(capsys, *NO_FIT, "--json", "--study", "nofit-json")
    assert code == 3, err[-2000:]
    result = json.loads(stdout)
    assert result["best"] is None and result["closest"]["measurement"]["feasible"] is False
    assert result["closest_lacks"].startswith("the busiest tile of IPU0 needs")
    flags = [c["flag"].split()[0] for c in result["changes_that_help"]]
    assert set(flags) == {
        "--batch-size",
        "--ipus",
    }  # more IPUs (from `plan`), a smaller micro-batch
    closest = result["closest"]["measurement"]
    floor = max(closest["max_tile_bytes"]) / closest["tile_capacity_bytes"]
    for change in result[
        "changes_that_help"
    ]:  # each fits, or comes closer than the closest trial (issue 43)
        assert change["tile_fraction"] > 0 and (change["fits"] or change["tile_fraction"] < floor)
    # Most helpful first: a change that fits, else the lower busiest tile.
    helps = result["changes_that_help"]
    assert [(not c["fits"], c["tile_fraction"]) for c in helps] == sorted(
        (not c["fits"], c["tile_fraction"]) for c in helps
    )


def test_exit_codes_are_documented() -> None:
    import ipu_autotune.cli as cli

    assert "3 the study ran but\nno trial fits" in cli.__doc__
    readme = (REPO / "README.md").read_text()
    assert "| 3 |" in readme


# --- resume header and stars ---------------------------------------------------------------------


def _study_with(states: list[str]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for state in states:
        if state == "waiting":
            study.enqueue_trial({}, skip_if_exists=False)
            continue
        trial = study.ask()
        if state == "complete":
            study.tell(trial, 1.0)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return study


def test_resume_point_names_the_next_trial_after_an_interrupt() -> None:
    # Trials 0-2 done, 3 interrupted (failed) and its retry queued as trial 4: the next trial is 4.
    study = _study_with(["complete", "complete", "complete", "fail", "waiting"])
    assert _resume_point(study) == "resuming: 4 trial(s) done, next is trial 4"
    assert (
        _resume_point(_study_with(["complete", "complete"]))
        == "resuming: 2 trial(s) done, next is trial 2"
    )


def _record(
    number: int,
    throughput: float,
    feasible: bool = True,
    origin: str = "sampled",
    config: Config | None = None,
) -> TrialRecord:
    m = Measurement(feasible=feasible, source="estimate", throughput=throughput)
    return TrialRecord(number, config or Config(), m, origin, "COMPLETE")


def test_stars_count_the_whole_study_after_a_resume() -> None:
    earlier = [_record(0, 100.0, origin="baseline"), _record(1, 500.0)]
    console = Console(file=open(os.devnull, "w"), width=80, force_terminal=False)
    view = TuneView(console, total=2, earlier=earlier)
    slower = _record(2, 300.0)
    view(slower)
    assert not view.table.is_best(slower) and not_none(view.table.best).number == 1
    assert "★" not in view.table.line(slower)
    faster = _record(3, 900.0)
    view(faster)
    assert view.table.is_best(faster) and "★" in view.table.line(faster)


def test_running_trials_have_a_row_after_the_finished_ones() -> None:
    table = TrialTable()
    table.add(_record(0, 100.0, origin="baseline"))
    table.running[1] = (Config(precision="16.16"), "sampled")
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    console.print(table)
    text = console.export_text()
    assert "running" in text and "16.16" in text


# --- study names ---------------------------------------------------------------------------------


def test_study_name_names_every_problem_field_that_differs_from_its_default() -> None:
    base = Problem("resnet101", 64)
    assert base.slug == "resnet101-bs64-2ipu-mk2"  # unchanged for existing studies
    assert Problem("resnet101", 64, optimizer="lamb").slug == "resnet101-bs64-2ipu-mk2-lamb"
    assert Problem("resnet101", 64, num_classes=10).slug == "resnet101-bs64-2ipu-mk2-num_classes10"
    # Generic over fields: one added later is covered without touching `slug`.
    Extended = dataclasses.make_dataclass(
        "Extended", [("dataset_size", int, 0), ("host", dict, None)], bases=(Problem,), frozen=True
    )
    assert Extended("resnet101", 64).slug == base.slug
    assert Extended("resnet101", 64, dataset_size=50000).slug.endswith("-dataset_size50000")
    with_host = Extended("resnet101", 64, host={"workers": 8, "loader": "async"}).slug
    assert with_host.startswith(base.slug + "-host-") and " " not in with_host
    changed: dict[str, Any] = {
        "ipus": 4,
        "target": "bow",
        "input_shape": (3, 32, 32),
        "global_batch": 1024,
        "optimizer": "sgd",
        "num_classes": 10,
        "dataset_size": 1_281_167,
        "host_memory_gb": 64.0,
        "max_global_batch": 4096,
    }
    # Measured host costs (--data) vary run to run; hf:/factory-input fields have their own tests
    # (decoder_seq_len: tests/test_hf_configs.py).
    every = {f.name for f in dataclasses.fields(Problem)} - {
        "model",
        "batch_size",
        "host_float_sample_s",
        "host_uint8_sample_s",
        "host_worker_speedups",
        "task",
        "seq_len",
        "inputs",
        "max_predictions",
        "attention_dropout",
        "trainer",
        "decoder_seq_len",
    }
    assert set(changed) == every, "a Problem field without a study-name case"
    names = {Problem("resnet101", 64, **{k: v}).slug for k, v in changed.items()}
    assert len(names) == len(every) and base.slug not in names
    assert Problem("resnet101", 64, host_float_sample_s=8e-4).slug == base.slug


def test_hf_study_names_carry_task_and_sequence_length_once() -> None:
    bert = Problem("hf:bert-base-uncased", 8, task="masked-lm", seq_len=128)
    # a study of the optimum-graphcore target is another study (issue 24)
    assert (
        Problem("hf:bert-base-uncased", 8, task="masked-lm", seq_len=128, trainer="optimum").slug
        == bert.slug + "-optimum"
    )
    assert bert.slug == "hf-bert-base-uncased-masked-lm-sl128-bs8-2ipu-mk2"
    gathered = Problem(
        "hf:bert-base-uncased",
        8,
        task="masked-lm",
        seq_len=128,
        max_predictions=20,
        attention_dropout=0.0,
    )
    assert gathered.slug == bert.slug + "-max_predictions20-attention_dropout0.0"


# --- the trial line ------------------------------------------------------------------------------


def test_trial_line_names_only_what_differs_from_the_baseline() -> None:
    baseline = Config(
        ipus_per_replica=2,
        splits=("layer3.8",),
        gradient_accumulation=3,
        available_memory_proportion=(0.6, 0.6),
    )
    best = Config(
        precision="16.16",
        partials="half",
        ipus_per_replica=1,
        replicas=2,
        gradient_accumulation=8,
        device_iterations=4,
        available_memory_proportion=(0.6,),
        eight_bit_io=True,
    )
    # Layout, precision and batching first; the advised numerics last (first to be cut).
    assert tl.changed_knobs(baseline, best) == "1ipu x2rep 16.16 ga8 di4 8bit partials:half"
    assert tl.changed_knobs(baseline, baseline) == "= baseline"
    assert tl.baseline_knobs(baseline) == "2ipu pipe 32.32 ga3"
    # Every knob has a short form; one added later shows as name=value, never hidden.
    for f in dataclasses.fields(Config):
        assert tl.knob_text(f.name, getattr(best, f.name))
    assert tl.knob_text("dataloader_workers", 8) == "dataloader_workers=8"


def test_short_verdicts_fit_their_column() -> None:
    over = Measurement(
        feasible=False,
        source="estimate",
        failure="oom",
        max_tile_bytes=[700_000, 400_000],
        capacity_bytes=[900_000_000] * 2,
        tile_capacity_bytes=638_976,
        required_bytes=[1, 1],
    )
    assert tl.short_verdict(over).startswith("OOM +") and tl.short_verdict(over).endswith("IPU0")
    assert len(tl.short_verdict(over)) <= 16
    crash = Measurement(
        feasible=False, source="compile", failure="compile_error", reason="x" * 300
    )
    assert tl.short_verdict(crash) == "compile_error"


# --- one IPU, warm starts, search spaces ---------------------------------------------------------


def test_one_ipu_export_sets_no_execution_strategy() -> None:
    problem = Problem("resnet18", 16, ipus=1)
    code = render_snippet(problem, Config(execution="sharded", io_tiles=64))
    assert "ShardedExecution" not in code and "PipelinedExecution" not in code
    two = render_snippet(
        Problem("resnet18", 16),
        Config(ipus_per_replica=2, splits=("layer3.0",), execution="sharded"),
    )
    assert "ShardedExecution" in two


def test_one_ipu_summary_does_not_report_an_execution_change() -> None:
    from ipu_autotune.present.ui import changes

    lines = changes(Config(), Config(execution="sharded", io_tiles=64))
    assert not any(line.startswith("execution") for line in lines)
    assert any(line.startswith("io_tiles") for line in lines)


@pytest.mark.slow
def test_no_fix_warm_start_when_the_baseline_already_fits() -> None:
    from ipu_autotune.guide.warmstart import naive_baseline, proposals
    from ipu_autotune.profiles.trace import profile_for
    from ipu_autotune.search.space import SearchSpace

    problem = Problem("resnet18", 16)
    profile = profile_for(problem)
    baseline = naive_baseline(problem, profile)
    origins = [p.origin for p in proposals(problem, profile, SearchSpace.load(problem), baseline)]
    assert origins[0] == "baseline" and not any(o.startswith("fix:") for o in origins)


def test_search_spaces_live_at_the_top_level_and_are_found() -> None:
    from ipu_autotune.search.space import builtin_space_dir, builtin_space_path

    assert (REPO / "search_spaces" / "default.toml").is_file()
    assert (
        not (REPO / "search_spaces").is_symlink()
        and not (REPO / "ipu_autotune" / "search_spaces").exists()
    )
    assert Path(str(builtin_space_dir())).resolve() == (REPO / "search_spaces").resolve()
    assert builtin_space_path("default").is_file()


def test_the_wheel_build_copies_the_search_spaces_into_the_package(tmp_path: Path) -> None:
    """setup.py's build_py: what a non-editable install gets (the lookup's first place)."""
    out = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    copied = sorted(p.name for p in (tmp_path / "ipu_autotune" / "search_spaces").glob("*.toml"))
    assert copied == sorted(p.name for p in (REPO / "search_spaces").glob("*.toml"))


def test_summary_memory_figures_agree_with_estimate() -> None:
    """The summary's per-IPU cell and `estimate`'s row give the same total and busiest-tile use."""
    import re as _re

    from ipu_autotune.backends.estimate import EstimateBackend
    from ipu_autotune.present.ui import compact_bytes, comparison, measurement_table

    problem = Problem("resnet18", 16)
    config = Config(ipus_per_replica=2, splits=("layer3.0",), gradient_accumulation=3)
    m = EstimateBackend().measure(problem, config)
    record = TrialRecord(0, config, m, "baseline", "COMPLETE")
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    console.print(comparison(problem, record, record, True))
    summary = console.export_text()
    console.print(measurement_table(m))
    table = console.export_text()
    for ipu in range(2):
        total = compact_bytes(m.required_bytes[ipu])
        tile = f"{m.max_tile_bytes[ipu] / m.tile_capacity_bytes:.0%}"
        assert f"{tile} tile; {total}" in summary
        row = next(line for line in table.splitlines() if line.strip().startswith(f"IPU{ipu}"))
        assert _re.search(rf"\b{_re.escape(total)}\s+{_re.escape(tile)}\s*$", row), row
    assert "OOM is per tile" in summary and "OOM is per tile" in table
