"""A Ctrl-C at any moment says how to go on: while the command's modules import (the first
second or two), while `tune` opens and traces, and during the trials. Reading commands never
create a database: a storage file that is not there is said, not made."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from testing import run_cli, sqlite_url

ROOT = Path(__file__).resolve().parents[1]
TUNE = ["resnet101", "--batch-size", "64"]


def console_script() -> list[str]:
    """The `ipu-autotune` entry point pyproject.toml declares, started as pip's script starts
    it."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][
        "ipu-autotune"
    ]
    module, function = entry.split(":")
    return [
        sys.executable,
        "-c",
        f"import sys; from {module} import {function}; sys.exit({function}())",
    ]


def interrupt_after(
    seconds: float, argv: list[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    # SIGINT left at its default in the child (a shell's background job ignores it)
    proc = subprocess.Popen(
        [*console_script(), *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"COLUMNS": "80", **_env()},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(seconds)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "COLUMNS"}


GO_ON = re.compile(
    r"(Run again with|Resume with|Run the same command to resume or start the study):\n"
    r"  ipu-autotune resnet101 --batch-size 64\b"
)


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [0.4, 1.0, 2.0, 3.0, 5.0])
def test_ctrl_c_in_tunes_first_seconds_says_how_to_go_on(tmp_path: Path, seconds: float) -> None:
    done = interrupt_after(seconds, TUNE, tmp_path)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert GO_ON.search(done.stderr), done.stderr[-2000:]
    for line in done.stderr.splitlines():
        assert len(line) <= 80, line


def test_ctrl_c_while_the_modules_import_says_nothing_was_started(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import builtins

    from ipu_autotune import launch

    real_import = builtins.__import__

    def slow_import(
        name: Any, globals: Any = None, locals: Any = None, fromlist: Any = (), level: Any = 0
    ) -> Any:
        if (
            name == "cli" and level == 1
        ):  # `from .cli import main`: the user presses Ctrl-C meanwhile
            raise KeyboardInterrupt
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", slow_import)
    assert launch.main(TUNE) == 130
    err = capsys.readouterr().err
    assert (
        "nothing was started. Run again with:\n  ipu-autotune resnet101 --batch-size 64\n" in err
    )
    assert launch.main(["studies"]) == 130
    assert capsys.readouterr().err == "Interrupted while starting: nothing was started.\n"


def test_ctrl_c_before_tune_opens_its_study_says_the_command_that_starts_it(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    real = importlib.import_module

    def interrupted(name: Any, package: Any = None) -> Any:
        if name == ".commands.tune":  # while the tune command's modules import
            raise KeyboardInterrupt
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", interrupted)
    code, _, err = run_cli(capsys, *TUNE)
    assert code == 130
    assert GO_ON.search(err) and "Traceback" not in err
    assert not list(in_tmp.iterdir())  # nothing was written


def test_ctrl_c_while_tracing_names_the_study_on_lines_that_fit(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipu_autotune.commands import tune_steps

    def interrupted(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_steps, "trace", interrupted)  # tune's steps trace the model
    code, _, err = run_cli(capsys, *TUNE)
    assert code == 130
    assert err.count("Interrupted") == 1  # said once: the command line does not add its own
    assert "(study resnet101-bs64-2ipu-mk2 not started)" in err and GO_ON.search(err)
    assert all(len(line) <= 80 for line in err.splitlines()), err


@pytest.mark.parametrize(
    "argv, code",
    [
        (["studies"], 0),
        (["studies", "--json"], 0),
        (["show", "--study", "resnet101-bs64-2ipu-mk2"], 2),
        (["show", "--study", "x", "--storage", "journal:///runs.journal"], 2),
        (["export", "--study", "resnet101-bs64-2ipu-mk2"], 2),
        (["report", "--study", "resnet101-bs64-2ipu-mk2"], 2),
        (["calibration"], 0),
    ],
)
def test_reading_commands_never_create_a_database(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, argv: list[Any], code: int
) -> None:
    got, out, err = run_cli(capsys, *argv)
    assert got == code, err
    assert not list(in_tmp.iterdir()), "a reading command wrote a file"
    if code == 2:
        assert (
            len(err.strip().splitlines()) == 1 and "does not exist" in err and "--storage" in err
        )
    elif argv == ["studies"]:
        assert out.strip() == "no studies in sqlite:///ipu-autotune.db"


def test_studies_still_reads_a_storage_that_exists(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    import optuna

    optuna.create_study(study_name="other", storage=sqlite_url(in_tmp / "ipu-autotune.db"))
    code, out, _ = run_cli(capsys, "studies")
    assert code == 0 and "other" in out and "not ipu-autotune" in out
