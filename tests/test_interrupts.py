"""Ctrl-C and SIGTERM: the first stops after recording the current trial, the second quits at
once; the storage is never left with a RUNNING trial, and resuming completes the requested
number of trials with nothing lost or duplicated.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
import workers_helpers as wh
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from testing import not_none

from ipu_autotune.study.records import trial_attrs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def load(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def poll(db: Path, done: int, timeout: float = 180.0, study: str | None = None) -> dict[str, int]:
    """Wait until `done` trials are finished in the SQLite file (read-only polls)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = wh.sqlite_states(db, study)
        if states.get("COMPLETE", 0) + states.get("FAIL", 0) >= done:
            return states
        time.sleep(0.25)
    raise AssertionError(
        f"fewer than {done} trials finished in {timeout} s: {wh.sqlite_states(db, study)}"
    )


def test_ctrl_c_stops_cleanly_and_the_printed_command_completes_the_study(tmp_path: Path) -> None:
    requested = 200
    db = tmp_path / "study.db"
    url = f"sqlite:///{db}"
    name = "resnet18-bs8-2ipu-mk2"
    cmd = [
        wh.cli_exe(),
        "resnet18",
        "--batch-size",
        "8",
        "--trials",
        str(requested),
        "--storage",
        url,
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=wh.env()
    )
    try:
        poll(db, 3, study=name)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Ctrl-C: stopping after the current trial" in out + err
    assert "Traceback" not in err

    study = load(url, name)
    states = [t.state for t in study.trials]
    assert TrialState.RUNNING not in states  # the storage is consistent after a clean stop
    completed = states.count(TrialState.COMPLETE)
    assert 3 <= completed < requested
    assert states.count(TrialState.FAIL) == 0  # estimates take milliseconds: the trial finished
    assert f"Interrupted after {completed} new trial(s)." in out

    # The exact command to resume, with the trials still to run.
    # (continued with " \\" over several lines at 80 columns, as a shell reads it)
    resume = re.search(
        r"^\s*resume: (ipu-autotune .*)$", re.sub(r" \\\n\s*", " ", out), re.MULTILINE
    )
    assert resume, out[-3000:]
    args = shlex.split(resume.group(1))
    assert args[args.index("--trials") + 1] == str(requested - completed)
    assert args[args.index("--storage") + 1] == url
    again = subprocess.run(
        [wh.cli_exe(), *args[1:], "--quiet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=wh.env(),
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]

    study = load(url, name)
    numbers = [t.number for t in study.trials]
    assert sorted(numbers) == list(range(requested))  # no duplicate, no gap
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    assert len(study.trials) == requested


def test_sigterm_interrupts_a_long_trial_after_the_grace_and_resume_retries_it(
    tmp_path: Path,
) -> None:
    """A measurement that cannot finish in the grace period is failed as interrupted and
    enqueued again; the next worker measures exactly that configuration."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    proc = wh.start_worker(
        url, "long", "--trials", "5", "--sleep", "60", "--grace", "0.5", cwd=tmp_path
    )
    try:
        assert wh.wait_for_line(proc, "MEASURING") == "MEASURING 0"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert elapsed < 15  # the grace (0.5 s), not the 60 s measurement
    assert "STOPPING" in out and "DONE 0 FAIL baseline, interrupted" in out

    study = load(url, "long")
    first = study.trials[0]
    assert (
        first.state == TrialState.FAIL
        and trial_attrs(first)["measurement"]["failure"] == "interrupted"
    )
    assert trial_attrs(first)["measurement"]["reason"].startswith("stopped")
    assert TrialState.RUNNING not in [t.state for t in study.trials]
    retries = [
        t for t in study.trials if RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == 0
    ]
    assert len(retries) == 1 and retries[0].state == TrialState.WAITING
    assert retries[0].params == first.params and retries[0].user_attrs["origin"] == "baseline"

    # Resume: the interrupted baseline is measured again, first among what waits.
    resumed = wh.start_worker(url, "long", "--trials", "3", cwd=tmp_path)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err[-3000:]
    study = load(url, "long")
    retry = study.trials[retries[0].number]
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["origin"] == "baseline"
    assert trial_attrs(retry)["config"] == trial_attrs(first)["config"]
    assert sorted(t.number for t in study.trials) == list(range(len(study.trials)))
    assert TrialState.RUNNING not in [t.state for t in study.trials]


def test_second_ctrl_c_quits_at_once_and_records_the_trial(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    # No grace: the first Ctrl-C alone would wait for the 60 s measurement.
    proc = wh.start_worker(url, "quit", "--trials", "5", "--sleep", "60", cwd=tmp_path)
    try:
        wh.wait_for_line(proc, "MEASURING")
        proc.send_signal(signal.SIGINT)
        wh.wait_for_line(proc, "STOPPING")
        time.sleep(0.5)
        assert proc.poll() is None  # still measuring after the first
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert elapsed < 10
    assert "QUIT" in out
    study = load(url, "quit")
    assert [t.state for t in study.trials if t.state != TrialState.WAITING] == [TrialState.FAIL]
    assert trial_attrs(study.trials[0])["measurement"]["failure"] == "interrupted"


@pytest.mark.skipif(
    not (wh.TESTS / "fake_sdk" / "poptorch").is_dir(), reason="needs the fake PopTorch SDK"
)
def test_cli_double_ctrl_c_during_a_compile_kills_it_and_says_how_to_resume(
    tmp_path: Path,
) -> None:
    """The product path with a long backend: a PopTorch compile (the fake SDK, hanging)."""
    db = tmp_path / "study.db"
    env = wh.env()
    env["PYTHONPATH"] = f"{wh.TESTS / 'fake_sdk'}:{env['PYTHONPATH']}"
    env["FAKE_POPTORCH_FAULT"] = "hang"
    cmd = [
        wh.cli_exe(),
        wh.MODEL,
        *wh.PROBLEM_ARGS,
        "--backend",
        "poptorch",
        "--no-screen",
        "--storage",
        f"sqlite:///{db}",
        "--trials",
        "5",
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 120
        while not wh.sqlite_states(db).get("RUNNING"):
            assert time.monotonic() < deadline and proc.poll() is None, not_none(
                proc.stderr
            ).read()[-3000:]
            time.sleep(0.25)
        time.sleep(1.0)  # the compile has started
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert "Resume with:" in err and f"--storage sqlite:///{db}" in err
    states = wh.sqlite_states(db)
    assert "RUNNING" not in states and states.get("FAIL") == 1
    (name,) = optuna.get_all_study_names(f"sqlite:///{db}")
    study = load(f"sqlite:///{db}", name)
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert trial_attrs(failed[0])["measurement"]["failure"] == "interrupted"
    # The compile subprocess did not outlive the tuner.
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout
