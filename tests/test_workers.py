"""Several workers, one study; and workers that die mid-trial.

- A worker killed with SIGKILL while measuring leaves a RUNNING trial; once its heartbeat is
  stale, the next worker fails it and measures the same parameters again (a retried trial).
- Three `ipu-autotune` processes on one study (SQLite, a journal file, PostgreSQL when
  IPU_AUTOTUNE_TEST_POSTGRES_URL is set) record every trial exactly once, the warm starts
  once, and every reader sees the same best trial.
"""

from __future__ import annotations

import collections
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import workers_helpers as wh
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from testing import NO_POSTGRES, POSTGRES_URL as POSTGRES, STORAGE_KINDS, storage_url

from ipu_autotune.study.records import trial_attrs
from ipu_autotune.study.storage import open_storage

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [wh.cli_exe(), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=wh.env(),
    )


def retried(t: Any) -> int | None:
    return RetryHeartbeatStaleTrialCallback.retried_trial_number(t)


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_a_killed_worker_trial_is_failed_and_retried_by_the_next_worker(
    tmp_path: Path, kind: Any
) -> None:
    url = storage_url(kind, tmp_path)
    name = f"crash-{uuid.uuid4().hex[:8]}"
    # A worker with a 1 s heartbeat (so a 3 s grace), killed while its trial is measuring.
    worker = wh.start_worker(
        url, name, "--trials", "5", "--sleep", "120", "--heartbeat", "1", cwd=tmp_path
    )
    try:
        assert wh.wait_for_line(worker, "MEASURING") == "MEASURING 0"
        time.sleep(1.5)  # a beat or two
    finally:
        worker.kill()
        worker.wait()
    killed = time.monotonic()
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    assert study.trials[0].state == TrialState.RUNNING
    stale_params = study.trials[0].params
    assert study.user_attrs["heartbeat_s"] == 1  # the study's, which every worker adopts

    time.sleep(
        max(0.0, killed + 4.5 - time.monotonic())
    )  # past the grace (SQLite's clock ticks in seconds)
    # A later worker: the CLI, with its default heartbeat, following the study's 1 s.
    proc = cli(
        wh.MODEL,
        *wh.PROBLEM_ARGS,
        "--storage",
        url,
        "--study",
        name,
        "--trials",
        "3",
        "--json",
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["trials_run"] == 3

    study = optuna.load_study(study_name=name, storage=open_storage(url))
    trials = study.trials
    assert trials[0].state == TrialState.FAIL
    again = [t for t in trials if retried(t) == 0]
    assert len(again) == 1, [(t.number, t.state, retried(t)) for t in trials]
    assert again[0].state == TrialState.COMPLETE and again[0].params == stale_params
    assert (
        again[0].user_attrs["origin"] == "baseline"
    )  # the warm start the dead worker was measuring
    assert TrialState.RUNNING not in [t.state for t in trials]
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    if kind == "postgres":
        optuna.delete_study(study_name=name, storage=open_storage(url))


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_three_workers_share_one_study(tmp_path: Path, kind: Any) -> None:
    url = storage_url(kind, tmp_path)
    name = f"shared-{uuid.uuid4().hex[:8]}"
    per_worker = [8, 6, 7]
    procs = [
        cli(
            wh.MODEL,
            *wh.PROBLEM_ARGS,
            "--storage",
            url,
            "--study",
            name,
            "--trials",
            str(n),
            "--json",
            "--out",
            str(tmp_path / f"out{i}"),
            cwd=tmp_path,
        )
        for i, n in enumerate(per_worker)
    ]  # started together: all race to create the study
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert "Traceback" not in err
        results.append(json.loads(out))
    assert [r["trials_run"] for r in results] == per_worker

    total = sum(per_worker)
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    trials = study.trials
    # Every trial recorded exactly once, none left running or waiting.
    assert sorted(t.number for t in trials) == list(range(total))
    assert all(t.state == TrialState.COMPLETE for t in trials), collections.Counter(
        t.state for t in trials
    )
    # The warm starts were enqueued by one worker only.
    origins = collections.Counter(trial_attrs(t)["origin"] for t in trials)
    warm = {o: n for o, n in origins.items() if o != "sampled"}
    assert warm.get("baseline") == 1 and set(warm.values()) == {1}, origins
    assert sum(
        1 for t in trials if t.number < len(warm) and trial_attrs(t)["origin"] != "sampled"
    ) == len(warm)

    # The same best from every reader: three fresh storages (one per worker) and `show --json`.
    bests = {
        optuna.load_study(study_name=name, storage=open_storage(url)).best_trial.number
        for _ in range(3)
    }
    show = subprocess.run(
        [wh.cli_exe(), "show", "--storage", url, "--study", name, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=wh.env(),
        timeout=120,
    )
    assert show.returncode == 0, show.stderr
    shown = json.loads(show.stdout)
    assert len(shown["trials"]) == total
    bests.add(shown["best"]["trial"])
    assert len(bests) == 1, bests
    best = shown["best"]["measurement"]["throughput"]
    for r in results:  # each worker reported the best it saw, never better than the final one
        assert r["best"]["measurement"]["throughput"] <= best
    if kind == "postgres":
        optuna.delete_study(study_name=name, storage=open_storage(url))


def test_postgres_url_with_a_password_never_reaches_output_or_files(tmp_path: Path) -> None:
    if not POSTGRES:
        pytest.skip(NO_POSTGRES)
    from sqlalchemy.engine import make_url

    password = make_url(POSTGRES).password
    if not password:
        pytest.skip("the test PostgreSQL URL carries no password")
    name = f"secret-{uuid.uuid4().hex[:8]}"
    out_dir = tmp_path / "out"
    proc = cli(
        wh.MODEL,
        *wh.PROBLEM_ARGS,
        "--storage",
        POSTGRES,
        "--study",
        name,
        "--trials",
        "3",
        "--out",
        str(out_dir),
        cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    texts = [out, err]
    for command in (
        ["show", "--study", name],
        ["studies"],
        ["export", "--study", name, "--format", "toml"],
    ):
        run = subprocess.run(
            [wh.cli_exe(), *command, "--storage", POSTGRES],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=wh.env(),
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        texts += [run.stdout, run.stderr]
    texts += [p.read_text() for p in out_dir.rglob("*") if p.is_file()]
    assert "***@" in out  # the header and the resume line name the storage, masked
    for text in texts:
        assert password not in text
    optuna.delete_study(study_name=name, storage=open_storage(POSTGRES))
