"""PopTorchBackend end to end against the fake SDK: every outcome is a Measurement, never a raise.

The trial subprocesses are slow to start (importing torch), so the scenarios run once, three
at a time, in a module-scoped fixture; each test then checks one of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest_fake_sdk import SMALL_CNN, fake_env

from ipu_autotune.backends.base import Measurement
from ipu_autotune.backends.poptorch import PopTorchBackend, measurement_from_result
from ipu_autotune.backends.poptorch.errors import (
    CaughtError,
    describe_exit,
    oom_evidence,
)
from ipu_autotune.problem import Config, Problem

OOM_PROBLEM = Problem(
    model=SMALL_CNN,
    batch_size=512,
    input_shape=(3, 32, 32),
    num_classes=10,
    optimizer="adamw",
    ipus=2,
)
FIT_PROBLEM = Problem(
    model=SMALL_CNN,
    batch_size=16,
    input_shape=(3, 32, 32),
    num_classes=10,
    optimizer="adamw",
    ipus=2,
)
PIPELINE = Config(ipus_per_replica=2, splits=("block2",), gradient_accumulation=3)
HANG_TIMEOUT_S = 6.0

#: name -> (backend options, problem, configs measured in order)
SCENARIOS: dict[str, tuple[dict[str, Any], Problem, list[Config]]] = {
    "hang": (
        dict(env=fake_env(FAKE_POPTORCH_FAULT="hang"), timeout_s=HANG_TIMEOUT_S, kill_grace_s=1.0),
        FIT_PROBLEM,
        [PIPELINE],
    ),
    "oom": (dict(env=fake_env()), OOM_PROBLEM, [PIPELINE]),
    "fits_run": (
        dict(env=fake_env(FAKE_POPTORCH_IPUS=2)),
        FIT_PROBLEM,
        [PIPELINE.replace(device_iterations=2)],
    ),
    "fits_offline": (dict(env=fake_env()), FIT_PROBLEM, [PIPELINE]),
    "crash": (dict(env=fake_env(FAKE_POPTORCH_FAULT="crash")), FIT_PROBLEM, [PIPELINE]),
    "compile_error": (
        dict(env=fake_env(FAKE_POPTORCH_FAULT="compile_error")),
        FIT_PROBLEM,
        [PIPELINE],
    ),
    "long_errors": (
        dict(env=fake_env(FAKE_POPTORCH_FAULT="long_errors")),
        OOM_PROBLEM,
        [PIPELINE],
    ),
    "accumulation_rule": (
        dict(env=fake_env()),
        FIT_PROBLEM,
        [PIPELINE.replace(gradient_accumulation=1)],
    ),
    "missing_model": (
        dict(env=fake_env()),
        FIT_PROBLEM.__class__(
            model="no_such_module_xyz:factory",
            batch_size=16,
            input_shape=(3, 32, 32),
            num_classes=10,
        ),
        [Config()],
    ),
    # the fault is scoped to the second trial of this backend: the first one is untouched
    # close() while the compile hangs: the tuner is shutting down
    "closed": (
        dict(env=fake_env(FAKE_POPTORCH_FAULT="hang"), kill_grace_s=1.0),
        FIT_PROBLEM,
        [PIPELINE],
    ),
    "scoped_fault": (
        dict(env=fake_env(FAKE_POPTORCH_FAULT="exit", FAKE_POPTORCH_FAULT_MATCH="trial-0002")),
        FIT_PROBLEM,
        [Config(), Config()],
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("poptorch-backend")

    def run(name: Any) -> Any:
        options, problem, configs = SCENARIOS[name]
        backend = PopTorchBackend(root / name, **{"timeout_s": 120.0, **options})
        if name == "closed":
            threading.Timer(HANG_TIMEOUT_S, backend.close).start()
        start = time.perf_counter()
        results = [backend.measure(problem, c) for c in configs]
        return results, time.perf_counter() - start

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run, name) for name in SCENARIOS}
        done = {
            name: f.result() for name, f in futures.items()
        }  # .result() re-raises: never should
    return {name: results for name, (results, _) in done.items()} | {
        f"{name}:seconds": seconds for name, (_, seconds) in done.items()
    }


@pytest.mark.slow
def test_an_oom_compile_is_infeasible_with_per_ipu_overflow_from_the_profile(
    outcomes: Any,
) -> None:
    [m] = outcomes["oom"]
    assert (m.feasible, m.failure, m.source) == (False, "oom", "compile")
    assert m.overflow_bytes > 0
    assert (
        len(m.required_bytes) == len(m.max_tile_bytes) == len(m.capacity_bytes) == 2
    )  # ipus_per_replica
    assert (
        m.details["overflow_per_ipu"][0] > 0
        and sum(m.details["overflow_per_ipu"]) == m.overflow_bytes
    )
    assert max(m.max_tile_bytes) > m.tile_capacity_bytes == 638_976
    assert m.violation > 0 and "IPU0" in m.reason and "out of memory" in m.reason
    assert m.details["oom_evidence"] == "error message"
    assert Path(m.details["profile_path"]).is_file() and Path(m.details["log"]).is_file()


@pytest.mark.slow
def test_a_fitting_config_on_attached_ipus_is_timed(outcomes: Any) -> None:
    [m] = outcomes["fits_run"]
    assert (m.feasible, m.failure, m.source) == (True, None, "run")
    assert m.throughput > 0 and m.step_time_s > 0
    timing = m.details["timing"]
    assert timing["samples_per_call"] == 16 * 3 * 1 * 2  # micro-batch x GA x replicas x DI
    # The timed run feeds synthetic data: that is the IPUs' speed; end to end adds the host's.
    assert m.device_throughput == pytest.approx(
        timing["samples_per_call"] / timing["seconds_per_call"]
    )
    assert m.throughput < m.device_throughput and m.bottleneck in ("host input", "device compute")
    assert m.details["host_part"].startswith("estimated")
    assert len(m.required_bytes) == 2 and all(r > 0 for r in m.required_bytes)
    assert max(m.max_tile_bytes) <= m.tile_capacity_bytes and m.overflow_bytes == 0


@pytest.mark.slow
def test_without_ipus_a_fitting_config_gets_memory_only_and_leaves_its_artifacts(
    outcomes: Any,
) -> None:
    [m] = outcomes["fits_offline"]
    assert (m.feasible, m.source, m.throughput) == (True, "compile", None)
    assert [set(b) for b in m.breakdown] == [
        {"code/exchange", "always-live", "not-always-live", "gaps"}
    ] * 2
    assert all(sum(b.values()) == r for b, r in zip(m.breakdown, m.required_bytes, strict=True))
    trial = Path(m.details["artifact_dir"])
    assert trial.name == "trial-0001"
    assert {p.name for p in trial.iterdir()} >= {
        "request.json",
        "snippet.py",
        "options.txt",
        "trial.log",
        "result.json",
        "report",
    }
    options = (trial / "options.txt").read_text()
    assert (
        options.startswith("Options(")
        and "autoReport.directory" in options
        and "ipu_version=2" in options
    )
    assert "'debug.allowOutOfMemory': 'true'" in options and "enableEngineCaching=True" in options
    assert "def make_options" in (trial / "snippet.py").read_text()
    result = json.loads((trial / "result.json").read_text())
    assert result["status"] == "ok" and result["compile_seconds"] >= 0


@pytest.mark.slow
def test_a_crash_is_a_crash_failure_with_the_log(outcomes: Any) -> None:
    [m] = outcomes["crash"]
    assert (m.feasible, m.failure) == (False, "crash")
    assert "SIGSEGV" in m.reason and m.details["returncode"] < 0
    assert Path(m.details["log"]).is_file() and m.details["log"] in m.reason


@pytest.mark.slow
def test_a_hang_is_killed_at_the_timeout(outcomes: Any) -> None:
    [m] = outcomes["hang"]
    assert (m.feasible, m.failure) == (False, "timeout")
    assert Path(m.details["log"]).is_file()
    assert outcomes["hang:seconds"] < HANG_TIMEOUT_S + 10
    with pytest.raises(ProcessLookupError):
        os.killpg(m.details["pid"], 0)  # the whole process group is gone


@pytest.mark.slow
def test_closing_the_backend_kills_a_running_trial(outcomes: Any) -> None:
    [m] = outcomes["closed"]
    assert (m.feasible, m.failure) == (False, "interrupted")
    assert outcomes["closed:seconds"] < HANG_TIMEOUT_S + 10
    with pytest.raises(ProcessLookupError):
        os.killpg(m.details["pid"], 0)


@pytest.mark.slow
def test_compile_errors_are_not_ooms(outcomes: Any) -> None:
    [injected] = outcomes["compile_error"]
    assert (injected.failure, injected.source) == ("compile_error", "compile")
    assert injected.reason.startswith("popart_exception: fake injected failure")
    [rule] = outcomes["accumulation_rule"]
    assert (
        rule.failure == "compile_error" and "gradientAccumulation must be greater" in rule.reason
    )


@pytest.mark.slow
def test_an_oom_redirected_to_poptorch_error_log_is_still_an_oom(outcomes: Any) -> None:
    [m] = outcomes["long_errors"]
    assert (m.failure, m.details["oom_evidence"]) == ("oom", "poptorch_error.log")
    assert m.overflow_bytes > 0
    assert (Path(m.details["artifact_dir"]) / "poptorch_error.log").is_file()


@pytest.mark.slow
def test_a_model_the_child_cannot_build_is_a_setup_crash(outcomes: Any) -> None:
    [m] = outcomes["missing_model"]
    assert m.failure == "crash" and m.reason.startswith("trial setup failed: UsageError")


@pytest.mark.slow
def test_faults_can_be_scoped_to_one_trial(outcomes: Any) -> None:
    first, second = outcomes["scoped_fault"]
    assert first.feasible and first.details["artifact_dir"].endswith("trial-0001")
    assert second.failure == "crash" and "exited with code 1" in second.reason


@pytest.mark.slow
def test_the_backend_never_raised(outcomes: Any) -> None:
    for name in SCENARIOS:
        assert all(isinstance(m, Measurement) for m in outcomes[name]), name


@pytest.mark.slow
def test_the_tuner_drives_the_backend_end_to_end(tmp_path: Path) -> None:
    """`ipu-autotune tune --backend poptorch` with the fake SDK importable: a relative --out,
    screening and the study loop around real trial subprocesses."""
    env = dict(os.environ, **fake_env())
    cmd = [
        sys.executable,
        "-m",
        "ipu_autotune",
        "tune",
        SMALL_CNN,
        "--batch-size",
        "256",
        "--input-shape",
        "3,32,32",
        "--num-classes",
        "10",
        "--backend",
        "poptorch",
        "--trials",
        "2",
        "--no-numerics",
        "--quiet",
    ]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = sorted(tmp_path.glob("ipu-autotune-out/**/trial-*/result.json"))
    assert results, "no trial ran"
    assert all(json.loads(r.read_text())["status"] in ("ok", "oom") for r in results)


# --- no subprocess ----------------------------------------------------------------------------


def test_an_interpreter_that_cannot_start_is_a_crash(tmp_path: Path) -> None:
    backend = PopTorchBackend(tmp_path, python=str(tmp_path / "no-python"))
    m = backend.measure(FIT_PROBLEM, Config())
    assert m.failure == "crash" and "cannot start" in m.reason


def test_trial_dirs_are_numbered_and_never_shared(tmp_path: Path) -> None:
    (tmp_path / "trial-0001").mkdir()  # left by an earlier run
    backend = PopTorchBackend(tmp_path)
    with ThreadPoolExecutor(max_workers=4) as pool:
        dirs = list(pool.map(lambda _: backend._new_trial_dir().name, range(8)))
    assert sorted(dirs) == [f"trial-{n:04d}" for n in range(2, 10)]


def test_child_env_puts_the_fake_first_and_drops_poplar_engine_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"autoReport.all": "true"}')
    env = PopTorchBackend(tmp_path, env=fake_env(FAKE_POPTORCH_IPUS=4)).child_env()
    assert "POPLAR_ENGINE_OPTIONS" not in env and env["FAKE_POPTORCH_IPUS"] == "4"
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith("fake_sdk")


def test_oom_evidence_follows_the_reference_heuristics() -> None:
    def err(type_: Any, message: Any, cls: Any = "poptorch.Error") -> Any:
        return CaughtError(cls, type_, message, message)

    oom = "Out of memory: Cannot fit all variable data onto one or more tiles"
    assert oom_evidence(err("popart_exception", oom)) == "error message"
    assert oom_evidence(
        err("poplar_stream_memory_allocation_error", "Out of memory. Single stream")
    )
    assert (
        oom_evidence(
            err("popart_exception", "See poptorch_error.log for details"), error_log_text=oom
        )
        == "poptorch_error.log"
    )
    assert (
        oom_evidence(
            err("popart_exception", "compile failed"),
            log_text="Out of memory, the graph profile is available here: x",
        )
        == "PopTorch log"
    )
    assert oom_evidence(err("popart_exception", "compile failed"), profile_overflow=10)
    assert oom_evidence(err("poptorch_cpp_error", "gradientAccumulation must be greater")) is None
    assert oom_evidence(err("", oom, cls="AssertionError")) is None  # only PopTorch errors
    assert describe_exit(-11) == "died from SIGSEGV" and describe_exit(3) == "exited with code 3"


def test_result_to_measurement_upgrades_a_compile_error_when_the_log_says_oom() -> None:
    error = CaughtError("poptorch.Error", "popart_exception", "Memory allocation error", "")
    result = {
        "status": "compile_error",
        "phase": "compile",
        "error": error.to_dict(),
        "memory": None,
    }
    m = measurement_from_result(
        result, {"log": "x.log"}, "[ERROR] Out of memory, the graph profile is available here: p"
    )
    assert (m.failure, m.source, m.details["oom_evidence"]) == ("oom", "compile", "PopTorch log")
    assert "no readable profile" in m.reason
    rejected = measurement_from_result(
        {
            "status": "setup_error",
            "phase": "options",
            "error": CaughtError("AssertionError", "", "Invalid key", "").to_dict(),
        },
        {"log": "x.log"},
    )
    assert rejected.failure == "compile_error" and "options" in rejected.reason
