"""The Python API (`ipu_autotune.tune`, `ipu_autotune.estimate`): a model object, a lambda and a
model string; the same study as the CLI (name, storage, resume); the CLI's errors as exceptions;
the result's exports; a model object through the PopTorch backend's compile process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from conftest_fake_sdk import SMALL_CNN, SmallCNN, fake_env, fake_sdk
from testing import not_none, run_cli
from torch import nn

import ipu_autotune
from ipu_autotune import api, cli
from ipu_autotune.errors import UsageError

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


@pytest.fixture(autouse=True)
def _in_tmp(in_tmp: Any) -> Any:
    """Runs write their output folder and default storage in the working folder: a fresh one."""
    return in_tmp


FAST: dict[str, Any] = dict(
    batch_size=8, input_shape=(3, 32, 32), num_classes=10, seed=3, quiet=True
)


class TinyNet(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10))

    def forward(self, x: Any) -> Any:
        return self.head(self.body(x))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The command's exit code, stdout, and stderr with its line breaks and runs of spaces as one
    space."""
    code, out, err = run_cli(capsys, *argv)
    return code, out, " ".join(err.split())


@pytest.mark.slow
def test_an_nn_module_instance_is_tuned_and_left_as_it_was(tmp_path: Path) -> None:
    model = TinyNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = ipu_autotune.tune(
        model, trials=5, storage=f"sqlite:///{tmp_path}/s.db", out=str(tmp_path / "out"), **FAST
    )
    assert result.study_name == "object-TinyNet-bs8-2ipu-mk2-3x32x32-num_classes10"
    assert [r.number for r in result.records] == [0, 1, 2, 3, 4]
    baseline = not_none(result.baseline)
    assert baseline.number == 0 and baseline.origin.startswith("baseline")
    assert result.best is not None and result.best.feasible
    best = not_none(not_none(result.best_measurement).throughput)
    assert best > 0 and best >= not_none(baseline.measurement.throughput)
    # the user's own model: never moved to meta, never trained
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    snippet = result.snippet()
    assert "def make_options():" in snippet and f"trial {result.best.number}" in snippet
    assert snippet == (tmp_path / "out" / "best_options.py").read_text()  # what the run wrote
    page = result._repr_html_()
    assert (
        page.startswith("<pre") and "IPU0 memory" in page and "█" in page and "best (trial" in page
    )
    report = result.report(tmp_path / "r.html")
    assert "<html" in report.read_text()[:200].lower()


@pytest.mark.slow
def test_a_lambda_is_named_by_the_class_it_builds_and_resumes_the_instances_study(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    first = ipu_autotune.tune(TinyNet(), trials=3, storage=url, **FAST)
    again = ipu_autotune.tune(lambda: TinyNet(), trials=2, storage=url, **FAST)
    assert again.study_name == first.study_name
    assert [r.number for r in again.records] == [0, 1, 2, 3, 4]
    named = ipu_autotune.tune(
        lambda: TinyNet(width=8), name="narrow", trials=2, storage=url, **FAST
    )
    assert named.study_name.startswith("object-narrow-bs8")
    # the narrow model was traced as itself, not from the cached trace of TinyNet
    assert (
        not_none(named.baseline).measurement.breakdown[0]["weights"]
        < not_none(first.baseline).measurement.breakdown[0]["weights"]
    )
    # the resume line a run prints for an object model is the Python call, and it resumes
    assert named.resume.startswith("ipu_autotune.tune(model, name='narrow', batch_size=8")
    call = named.resume.removesuffix(")") + ", trials=2, quiet=True)"  # fewer than the default 60
    resumed = eval(call, {"ipu_autotune": ipu_autotune, "model": TinyNet(width=8)})
    assert resumed.study_name == named.study_name and len(resumed.records) == 2 + 2


@pytest.mark.slow
def test_a_model_string_resumes_a_study_the_cli_started_under_the_same_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    flags = [
        "--batch-size",
        "8",
        "--input-shape",
        "3,32,32",
        "--num-classes",
        "10",
        "--storage",
        url,
    ]
    code, out, err = _cli(capsys, SMALL_CNN, *flags, "--trials", "3", "--json", "--seed", "3")
    assert code == 0, err
    cli_name = json.loads(out)["study"]
    result = ipu_autotune.tune(SMALL_CNN, trials=2, **{**FAST, "storage": url})
    assert (
        result.study_name
        == cli_name
        == "conftest_fake_sdk-small_cnn-bs8-2ipu-mk2-3x32x32-num_classes10"
    )
    assert [r.number for r in result.records] == [0, 1, 2, 3, 4]
    names = [s.study_name for s in optuna.get_all_study_summaries(url)]
    assert names == [cli_name]
    # and the CLI sees what the API added
    code, out, _ = _cli(capsys, "show", "--study", cli_name, "--storage", url, "--json")
    assert code == 0 and len(json.loads(out)["trials"]) == 5


@pytest.mark.parametrize(
    "keywords,argv",
    [
        (dict(batch_size=0), ["--batch-size", "0"]),
        (dict(batch_size=8, optimizer="adamx"), ["--batch-size", "8", "--optimizer", "adamx"]),
        (
            dict(batch_size=8, storage="mysql://nowhere/x"),
            ["--batch-size", "8", "--storage", "mysql://nowhere/x"],
        ),
        (dict(batch_size=8, input_shape="3,a,4"), ["--batch-size", "8", "--input-shape", "3,a,4"]),
    ],
)
def test_bad_input_raises_the_clis_one_line_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], keywords: Any, argv: list[Any]
) -> None:
    code, _, err = _cli(capsys, SMALL_CNN, *argv)
    assert code == 2 and err.startswith("error: ")
    with pytest.raises(UsageError) as caught:
        ipu_autotune.tune(SMALL_CNN, **keywords)
    assert str(caught.value) == err.removeprefix("error: ")


def test_an_unknown_model_name_and_an_unknown_keyword_raise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _cli(capsys, "resnet5", "--batch-size", "8")
    with pytest.raises(UsageError) as caught:
        ipu_autotune.tune("resnet5", batch_size=8)
    assert code == 2 and str(caught.value) == err.removeprefix("error: ")
    with pytest.raises(UsageError, match="unknown keyword 'batchsize'.*batch_size"):
        ipu_autotune.tune("resnet18", batchsize=8)
    with pytest.raises(UsageError, match="model: expected an nn.Module"):
        ipu_autotune.tune(42, batch_size=8)


def test_keywords_are_the_clis_flags() -> None:
    import argparse

    subparsers = next(
        a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    parser_flags = {
        s
        for a in subparsers.choices["tune"]._actions
        for s in a.option_strings
        if s.startswith("--")
    }
    for dest, action in api.keywords("tune").items():
        assert (
            "--" + dest.replace("_", "-") in parser_flags
            or action.option_strings[0] in parser_flags
        )
    assert {"batch_size", "trials", "storage", "study", "backend", "seed", "jobs"} <= set(
        api.keywords("tune")
    )
    assert "worker" not in api.keywords("tune")  # the plumbing of --jobs is not a keyword


def test_estimate_returns_the_clis_measurement_as_data(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(
        capsys,
        "estimate",
        SMALL_CNN,
        "--batch-size",
        "8",
        "--input-shape",
        "3,32,32",
        "--num-classes",
        "10",
        "--set",
        "precision=16.16",
        "--set",
        "gradient_accumulation=8",
        "--json",
    )
    assert code == 0
    expected = json.loads(out)
    result = ipu_autotune.estimate(
        SMALL_CNN,
        {"precision": "16.16", "gradient_accumulation": 8},
        batch_size=8,
        input_shape=(3, 32, 32),
        num_classes=10,
    )
    assert result.to_dict() == expected
    assert [row["total"] for row in result.memory] == expected["required_bytes"]
    assert result.throughput == expected["throughput"] and result.feasible == expected["feasible"]
    assert "IPU0" in result._repr_html_()
    with pytest.raises(UsageError, match="config: unknown key 'precison'"):
        ipu_autotune.estimate(
            SMALL_CNN, {"precison": "16.16"}, batch_size=8, input_shape=(3, 32, 32)
        )


@pytest.mark.slow
def test_options_is_a_real_poptorch_options_where_poptorch_imports(tmp_path: Path) -> None:
    result = ipu_autotune.tune(TinyNet(), trials=3, storage=f"sqlite:///{tmp_path}/s.db", **FAST)
    with pytest.raises(UsageError, match="PopTorch is not importable"):
        result.options()
    with fake_sdk() as poptorch:
        opts = result.options()
        assert isinstance(opts, poptorch.Options)
        best = not_none(result.best_config)
        assert opts.Training.gradient_accumulation == best.gradient_accumulation
        assert opts.device_iterations == best.device_iterations
    # An IPUConfig is what optimum-graphcore's IPUTrainer trains: hf: models only (issue 24).
    with pytest.raises(UsageError, match="IPUTrainer trains hf: models"):
        result.ipu_config()


@pytest.mark.slow
def test_ipu_config_of_an_hf_model_is_the_export_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    # --trainer optimum: the search keeps to configurations an IPUConfig can say (another
    # trainer's best may not be exportable as one, as `export` then says)
    result = ipu_autotune.tune(
        "hf:bert-base-uncased",
        batch_size=2,
        seq_len=32,
        trials=2,
        quiet=True,
        storage=url,
        seed=1,
        trainer="optimum",
    )
    config = result.ipu_config(tmp_path / "ipu_config.json")
    assert config["ipus_per_replica"] == not_none(result.best_config).ipus_per_replica
    assert json.loads((tmp_path / "ipu_config.json").read_text()) == config
    code, out, _ = _cli(
        capsys, "export", "--study", result.study_name, "--storage", url, "--format", "ipu-config"
    )
    assert code == 0 and json.loads(out) == config
    assert json.loads((Path(result.files["optimum"])).read_text()) == config  # what the run wrote


@pytest.mark.slow
def test_a_model_object_is_pickled_for_the_poptorch_compile_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipu_autotune.backends.poptorch import PopTorchBackend
    from ipu_autotune.models import objects
    from ipu_autotune.problem import Config, Problem

    name = objects.register(SmallCNN(), "small")  # its class is importable: conftest_fake_sdk
    backend = PopTorchBackend(tmp_path, timeout_s=120, env=fake_env())
    m = backend.measure(Problem(name, 8, input_shape=(3, 32, 32), num_classes=10), Config())
    assert m.source == "compile" and m.feasible, m.reason
    assert (tmp_path / "object-small.pkl").exists()


def test_a_notebook_class_is_refused_for_poptorch_before_any_study(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook_class = type("NotebookNet", (TinyNet,), {"__module__": "__main__"})
    url = f"sqlite:///{tmp_path}/s.db"
    with (
        fake_sdk(),
        pytest.raises(
            UsageError, match="cannot import NotebookNet .*move the class into a .py file"
        ),
    ):
        ipu_autotune.tune(notebook_class(), backend="poptorch", trials=2, storage=url, **FAST)
    assert not (tmp_path / "s.db").exists() or optuna.get_all_study_summaries(url) == []
    with pytest.raises(UsageError, match="jobs=2 starts worker processes"):
        ipu_autotune.tune(TinyNet(), jobs=2, storage=url, **FAST)


@pytest.mark.slow
def test_the_command_line_says_an_object_models_study_resumes_from_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    result = ipu_autotune.tune(TinyNet(), name="Elsewhere", trials=2, storage=url, **FAST)
    from ipu_autotune.models import objects

    objects._REGISTRY.pop("Elsewhere")  # as in a new process
    code, _, err = _cli(
        capsys, "export", "--study", result.study_name, "--storage", url, "--format", "toml"
    )
    assert code == 0  # reading a study needs no model
    code, _, err = _cli(capsys, "object:Elsewhere", "--batch-size", "8", "--storage", url)
    assert (
        code == 2
        and "was a Python object in another session; pass the object to ipu_autotune.tune" in err
    )


SCRIPT = """
import sys
from torch import nn
import ipu_autotune
sys.path.insert(0, {tests!r})
from conftest_fake_sdk import SmallCNN
r = ipu_autotune.tune(SmallCNN(), batch_size=8, input_shape=(3, 32, 32), num_classes=10,
                      trials=100000, storage={url!r}, seed=1)
print("RESULT", r.interrupted, len(r.records), r.best is not None, flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_stops_a_python_run_after_the_current_trial_and_returns_the_result(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    script = SCRIPT.format(tests=str(Path(__file__).parent), url=url)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 120
        for line in not_none(proc.stdout):
            if line.startswith("trial   3") or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "Ctrl-C: stopping after the current trial" in out
    interrupted, count, fits = out.split("RESULT ")[1].split()
    assert interrupted == "True" and 4 <= int(count) < 100 and fits == "True"
    assert "Traceback" not in err


def test_the_readme_quick_start_shows_the_command_and_the_same_call_in_three_lines() -> None:
    import re

    from ipu_autotune.api_result import TuneResult

    quick = (
        (Path(__file__).resolve().parents[1] / "README.md")
        .read_text()
        .split("## Install and run")[0]
    )
    command = not_none(re.search(r"```\n(ipu-autotune [^\n]+)\n```", quick)).group(1)
    block = not_none(re.search(r"```python\n(.*?)```", quick, re.S)).group(1)
    lines = [line for line in block.splitlines() if line.strip()]  # PEP 8's blank line aside
    assert len(lines) == 3 and lines[0] == "import ipu_autotune"
    call = not_none(re.search(r"result = ipu_autotune\.tune\((.*?)\)", lines[1])).group(1)
    model, keywords = eval(f"(lambda model, **keywords: (model, keywords))({call})")
    from ipu_autotune.options.keywords import from_keywords
    from ipu_autotune.options.parser import options_from

    assert from_keywords("tune", model, keywords) == options_from(
        cli.build_parser().parse_args(["tune", *command.split()[1:]])
    )
    assert not_none(re.match(r"result\.(\w+)\(\)", lines[2])).group(1) in dir(TuneResult)


def test_in_jupyter_without_ipywidgets_the_trials_print_as_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util
    import io

    from rich.console import Console

    from ipu_autotune.backends.base import Measurement
    from ipu_autotune.present import live_view
    from ipu_autotune.problem import Config
    from ipu_autotune.study.records import TrialRecord

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "ipywidgets" else real(name, *a),
    )
    out = io.StringIO()
    console = Console(force_jupyter=True, file=out, width=100)
    record = TrialRecord(
        0,
        Config(),
        Measurement(feasible=True, source="estimate", throughput=123.0),
        "baseline",
        "COMPLETE",
    )
    with live_view.TuneView(console, 3) as view:
        view(record)
    assert view.live is None  # rich would draw a live display nowhere without the widget
