"""A full study on the fake SDK, through the CLI: compiles, screening, OOMs, crashes and hangs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest_fake_sdk import SMALL_CNN, fake_env

from ipu_autotune.study.records import trial_attrs

pytestmark = pytest.mark.slow
PROBLEM = [SMALL_CNN, "--batch-size", "512", "--input-shape", "3,32,32", "--num-classes", "10"]


def tune(cwd: Any, *args: str, exit_code: int = 0, **env: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "ipu_autotune",
        "tune",
        *PROBLEM,
        "--backend",
        "poptorch",
        "--no-numerics",
        "--seed",
        "0",
        "--json",
        *args,
    ]
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **fake_env(**env)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == exit_code, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def trials(cwd: Any, result: Any) -> Any:
    study = optuna.load_study(
        study_name=result["study"], storage=f"sqlite:///{cwd}/ipu-autotune.db"
    )
    return study.trials


def test_a_study_survives_crashes_and_hangs_and_records_ooms_from_profiles(tmp_path: Path) -> None:
    # Run 1: screening on, IPUs attached, the third compile crashes.
    first = tune(
        tmp_path,
        "--trials",
        "5",
        FAKE_POPTORCH_IPUS="2",
        FAKE_POPTORCH_FAULT="crash",
        FAKE_POPTORCH_FAULT_MATCH="trial-0003",
    )
    assert first["trials_run"] == 5
    assert first["compiles"]["saved"] > 0 and first["compiles"]["run"] > 0  # screening reported
    done = trials(tmp_path, first)
    crashed = [t for t in done if t.state.name == "FAIL"]
    assert len(crashed) == 1 and trial_attrs(crashed[0])["measurement"]["failure"] == "crash"
    assert crashed[0].number < done[-1].number  # the study went on after it
    timed = [
        trial_attrs(t)["measurement"]
        for t in done
        if trial_attrs(t)["measurement"]["source"] == "run"
    ]
    assert timed and all(m["feasible"] and m["throughput"] > 0 for m in timed)
    screened = [t for t in done if trial_attrs(t)["measurement"]["source"] == "estimate"]
    assert len(screened) == first["compiles"]["saved"]

    # Run 2, resumed: every candidate compiled, offline; the first compile hangs.
    second = tune(
        tmp_path,
        "--trials",
        "3",
        "--no-screen",
        "--compile-timeout",
        "20",
        "--out",
        "run2",
        FAKE_POPTORCH_FAULT="hang",
        FAKE_POPTORCH_FAULT_MATCH="trial-0001",
    )
    assert second["trials_total"] == 8 and second["compiles"]["saved"] == 0
    done = trials(tmp_path, second)[5:]
    hung = [t for t in done if t.state.name == "FAIL"]
    assert len(hung) == 1 and trial_attrs(hung[0])["measurement"]["failure"] == "timeout"
    assert second["best"]["measurement"]["feasible"]

    # Run 3, a new study compiling only its baseline (FP32, micro-batch 512): the guide keeps
    # predicted OOMs out of runs 1-2, so the out-of-memory compile is asked for here (without
    # the calibration store, whose prior from runs 1-2 would put the guide's choice first).
    third = tune(
        tmp_path,
        "--study",
        "baseline-only",
        "--trials",
        "1",
        "--no-screen",
        "--out",
        "run3",
        "--no-calibration",
        exit_code=3,
    )
    ooms = [t for t in trials(tmp_path, third) if t.state.name == "COMPLETE"]
    assert len(ooms) == 1 and not trial_attrs(ooms[0])["measurement"]["feasible"]
    for t in ooms:
        m = trial_attrs(t)["measurement"]
        assert m["source"] == "compile" and m["failure"] == "oom" and m["overflow_bytes"] > 0
        assert len(m["max_tile_bytes"]) == trial_attrs(t)["config"]["ipus_per_replica"]
        (violation,) = t.constraints.values()  # exactly one, graded by the profile
        assert violation > 0  # completed-infeasible, graded by the profile
