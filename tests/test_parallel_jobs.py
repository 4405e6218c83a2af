"""`tune --jobs N`: N worker processes on one study record every trial once, and Ctrl-C
leaves no trial running and no worker behind."""

from __future__ import annotations

import dataclasses
import json
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import workers_helpers as wh
from optuna.trial import TrialState

from ipu_autotune.commands.tune import WORKER_COMMAND, worker_inputs
from ipu_autotune.options import TuneOptions
from ipu_autotune.study.parallel import shares

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
]
NAME = "tiny"


def tune(tmp_path: Path, *extra: str) -> list[str]:
    return [
        wh.cli_exe(),
        "tune",
        wh.MODEL,
        *wh.PROBLEM_ARGS,
        "--backend",
        "estimate",
        "--no-numerics",
        "--storage",
        f"sqlite:///{tmp_path / 's.db'}",
        "--study",
        NAME,
        *extra,
    ]


def test_a_worker_is_given_the_runs_options_with_its_share() -> None:
    assert shares(7, 3) == [3, 2, 2]
    assert shares(1, 4) == [1]
    run = TuneOptions(
        model="resnet18",
        batch_size=8,
        jobs=4,
        trials=40,
        quiet=False,
        json=True,
        storage="sqlite:///s.db",
        micro_batch="8-64",
    )
    given = [pickle.loads(b) for b in worker_inputs(run, 4)]
    assert [g.trials for g in given] == [10, 10, 10, 10]
    assert given[0] == dataclasses.replace(
        run, jobs=1, trials=10, worker=True, quiet=True, json=False
    )
    assert given[0].micro_batch == {
        "low": 8,
        "high": 64,
        "log": True,
    }  # the checked value, not its text
    assert WORKER_COMMAND[1:] == ["-m", "ipu_autotune.commands.tune_worker"]


def test_jobs_2_records_every_trial_once(tmp_path: Path) -> None:
    done = subprocess.run(
        tune(tmp_path, "--jobs", "2", "--trials", "24", "--json"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=wh.env(),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["trials_total"] == 24
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{tmp_path / 's.db'}")
    assert sorted(t.number for t in study.trials) == list(range(24))  # each once, no gap
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    lines = (tmp_path / "ipu-autotune-out" / NAME / "trials.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["trial"] for x in lines) == list(range(24))


def test_jobs_needs_a_shared_storage(tmp_path: Path) -> None:
    cmd = tune(tmp_path, "--jobs", "2")
    cmd[cmd.index("--storage") + 1] = "memory:"
    done = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, env=wh.env(), timeout=300
    )
    assert done.returncode == 2
    assert "--jobs needs a storage the worker processes share" in done.stderr


def test_ctrl_c_with_jobs_2_leaves_no_trial_running_and_no_worker_behind(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    proc = subprocess.Popen(
        tune(tmp_path, "--jobs", "2", "--trials", "100000"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=wh.env(),
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            states = wh.sqlite_states(db, NAME)
            if states.get("COMPLETE", 0) >= 6:  # both workers well into the study
                break
            time.sleep(0.25)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert "Ctrl-C: stopping after the current trial" in out
    after = wh.sqlite_states(db, NAME)
    assert "RUNNING" not in after
    time.sleep(2.0)
    assert wh.sqlite_states(db, NAME) == after  # no worker still running trials
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{db}")
    numbers = [t.number for t in study.trials]
    assert sorted(numbers) == list(range(len(numbers)))
    assert after.get("COMPLETE", 0) >= 6


def test_a_worker_told_to_stop_while_it_starts_stops_at_its_first_trial() -> None:
    """The parent passes a Ctrl-C on as soon as it comes, and a worker may still be importing
    (a library's bare `except` can lose a KeyboardInterrupt there): the signal is kept until
    the run loop's handler is in place, which acts on it before any trial; and after that
    block the handlers are those from before again."""
    code = """
import os, signal
from ipu_autotune.study import stop_signals
before = signal.getsignal(signal.SIGINT)  # the interpreter's own (or SIG_IGN, inherited)
stop_signals.catch_early()
os.kill(os.getpid(), signal.SIGINT)  # while 'starting': kept, not raised
got = []
with stop_signals.handled(lambda signum, frame: got.append(signum)):
    assert got == [signal.SIGINT], got
assert signal.getsignal(signal.SIGINT) is before
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
