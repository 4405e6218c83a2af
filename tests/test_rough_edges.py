"""Issue 43's rough edges, one test each: what a new user hit on a fresh clone."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, cast

import pytest
from rich.console import Console
from testing import run_cli, sqlite_url

from ipu_autotune.backends.base import Measurement
from ipu_autotune.problem import Config
from ipu_autotune.profiles.model_profile import ModelProfile
from ipu_autotune.study.records import TrialRecord

ROOT = Path(__file__).resolve().parents[1]


def test_a_misspelt_subcommand_is_named_not_tuned(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    code, _, err = run_cli(capsys, "shwo")
    assert code == 2
    assert "unknown command 'shwo'; did you mean 'show'?" in err
    assert "batch" not in err  # not read as a model to tune
    # a model name close to no command still starts a tune (and a misspelt model is the zoo's
    # error)
    code, _, err = run_cli(capsys, "resnt18", "-b", "2")
    assert code == 2 and "unknown model 'resnt18'" in err


def test_a_suggestion_changing_a_knob_omitted_at_its_default_is_labelled() -> None:
    from ipu_autotune.guide.suggestions import describe
    from ipu_autotune.present.ui import changes

    before, after = Config(), Config(embedding_serialization=8)
    assert (
        "embedding_serialization" not in before.to_dict()
    )  # stored dicts leave it out at its default
    no_profile = cast(ModelProfile, None)  # describe reads it for checkpoints only
    assert describe(before, after, profile=no_profile) == "embedding_serialization 8"
    assert changes(before, after) == ["embedding_serialization: 1 → 8"]


def test_trial_lines_are_cut_between_knobs_never_inside_one() -> None:
    from ipu_autotune.present import trial_line as tl
    from ipu_autotune.present.live_view import TuneView

    out = io.StringIO()
    view = TuneView(Console(file=out, width=80, force_terminal=False), 1)
    long_split = Config(
        splits=("model.decoder.layers.11", "model.decoder.layers.23"),
        precision="16.16",
        gradient_accumulation=16,
        device_iterations=8,
        recompute="standard",
        optimizer_state="half",
        replicated_tensor_sharding=True,
    )
    record = TrialRecord(
        number=7,
        state="COMPLETE",
        config=long_split,
        origin="sampled",
        seconds=0.1,
        measurement=Measurement(feasible=True, source="estimate", throughput=123.0),
    )
    with view:
        view(record)
    line = out.getvalue().rstrip("\n")
    assert len(line) <= 80
    full = view.table.line(record)
    assert len(full) > 80  # the case in point: a line that must be cut
    shown = line.removesuffix(" …").split()
    assert shown == full.split()[: len(shown)]  # every word shown is whole
    assert tl.fit_words("a " + "x" * 100, 20) == "a …"


def test_output_paths_are_never_folded_mid_word_at_80_columns(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    out = (
        in_tmp
        / "a-rather-long-output-folder-name-for-hf-studies"
        / "bert-base-uncased-bs8-4ipu-mk2-run"
    )
    code, stdout, _ = run_cli(
        capsys,
        "resnet18",
        "-b",
        "8",
        "--trials",
        "2",
        "--seed",
        "0",
        "--storage",
        sqlite_url(in_tmp / "s.db"),
        "--out",
        str(out),
    )
    assert code == 0
    written = sorted(p for p in out.iterdir() if p.is_file())
    assert written
    assert len(str(written[0])) > 80  # the case in point: longer than the terminal
    for path in written:
        assert any(str(path) in line for line in stdout.splitlines()), (
            f"{path} is not whole on one line"
        )


def test_ctrl_c_while_tracing_prints_the_line_that_starts_again(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipu_autotune.commands import tune_steps

    def interrupted(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_steps, "trace", interrupted)
    code, _, err = run_cli(
        capsys, "resnet18", "-b", "8", "--ipus", "4", "--storage", sqlite_url(in_tmp / "s.db")
    )
    assert code == 130
    assert "Interrupted before any trial ran" in err
    again = re.search(r"^\s+(ipu-autotune .*)$", err, re.MULTILINE)
    assert again and "resnet18 --batch-size 8 --ipus 4" in again.group(1)
    assert "--storage" in again.group(1)


def test_calibration_without_a_store_says_it_is_empty(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    code, out, err = run_cli(capsys, "calibration")
    assert code == 0, err
    assert "is empty (no compile recorded yet)" in out
    code, out, _ = run_cli(capsys, "calibration", "--json")
    assert code == 0 and '"records": 0' in out
    assert not (in_tmp / "ipu-autotune-calibration.db").exists()  # saying so creates nothing


@pytest.mark.parametrize(
    "url, needles",
    [
        ("mysql://x", ("missing database driver for mysql (MySQLdb)", "pip install mysqlclient")),
        (
            "mysql+pymysql://x",
            ("missing database driver for mysql (pymysql)", "pip install pymysql"),
        ),
    ],
)
def test_a_missing_database_driver_is_named_with_its_install(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, url: str, needles: tuple[Any, ...]
) -> None:
    code, _, err = run_cli(capsys, "resnet18", "-b", "8", "--storage", url)
    assert code == 2
    assert "(None)" not in err and "PostgreSQL" not in err
    for needle in needles:
        assert needle in err


def test_poptorch_not_found_is_said_by_the_command_not_its_workers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipu_autotune.commands import common

    monkeypatch.setattr(common, "resolve_backend_name", lambda name: "estimate")
    from ipu_autotune.options.shared import MeasureOptions

    args: dict[str, Any] = dict(backend="auto", headroom=0.05, fit_confidence=0.9, quiet=False)
    unread = Console(file=io.StringIO())  # the estimate backend prints nothing to it
    common.make_backend(MeasureOptions(**args, worker=False), None, unread)
    assert "PopTorch not found" in capsys.readouterr().err
    common.make_backend(MeasureOptions(**args, worker=True), None, unread)
    assert "PopTorch not found" not in capsys.readouterr().err


def test_the_readme_states_the_install_as_measured() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "2.5 minutes and 6.0 GB" in readme
    assert "1.5\nminutes" not in readme and "about 1.5 minutes" not in readme
