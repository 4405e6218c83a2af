"""Test helpers for interrupts and workers: a tiny model, a slow backend, and a worker script.

`python tests/workers_helpers.py URL STUDY --trials N --sleep S ...` is one tuning worker built
on the library API (open_storage, open_study, Runner), like `ipu-autotune` but with a backend
that sleeps in every measurement, so a test can interrupt or kill it while a trial is RUNNING.
It prints one line per event, flushed: `MEASURING <trial number>`, `DONE <number> <state>`,
`STOPPING`, `QUIT`. Nothing here is product code.

The model is importable by the CLI as "workers_helpers:tiny_cnn" (tests/ on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
MODEL = "workers_helpers:tiny_cnn"
#: the problem every helper worker tunes, and the CLI flags that name the same problem
PROBLEM_ARGS = ["--batch-size", "4", "--input-shape", "3,16,16", "--num-classes", "10"]


class TinyCNN(nn.Module):
    """Four conv blocks and a head: enough units for two- and four-IPU pipelines."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block3 = nn.Sequential(
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU()
        )
        self.block4 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block4(self.block3(self.block2(self.block1(x))))
        out: torch.Tensor = self.head(self.pool(x).flatten(1))
        return out


def tiny_cnn(num_classes: int = 10) -> nn.Module:
    return TinyCNN(num_classes)


def problem() -> Any:
    from ipu_autotune.problem import Problem

    return Problem(MODEL, 4, input_shape=(3, 16, 16), num_classes=10)


def env() -> dict[str, str]:
    """Subprocess environment: tests/ importable, wide output, no PopTorch."""
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}


def cli_exe() -> str:
    return str(Path(sys.executable).with_name("ipu-autotune"))


def start_worker(url: str, study: str, *args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), url, study, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )


def wait_for_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 120.0) -> str:
    """Read the worker's stdout until a line starts with `prefix` (the worker must flush)."""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None and proc.stderr is not None  # start_worker pipes both
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(
        f"no {prefix!r} line from the worker (exit {proc.poll()}): {''.join(seen)[-2000:]}"
        f"{proc.stderr.read()[-2000:] if proc.poll() is not None else ''}"
    )


def sqlite_states(db: Path, study: str | None = None) -> dict[str, int]:
    """Trial states straight from an SQLite file, read-only (no Optuna: cheap to poll)."""
    if not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        query = "SELECT t.state, COUNT(*) FROM trials t JOIN studies s ON s.study_id = t.study_id"
        rows = con.execute(
            query + (" WHERE s.study_name = ?" if study else "") + " GROUP BY t.state",
            (study,) if study else (),
        ).fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return {}
    finally:
        con.close()
    return {str(state): n for state, n in rows}


def storage_snapshot(db: Path) -> list[tuple[Any, ...]]:
    """Every study and trial in an SQLite file (name, number, state), or [] if there is none."""
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(
            "SELECT s.study_name, t.number, t.state FROM studies s "
            "LEFT JOIN trials t ON s.study_id = t.study_id ORDER BY 1, 2"
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


# --- the worker --------------------------------------------------------------------------------


def _sleepy_backend(seconds: float) -> Any:
    from ipu_autotune.backends.base import Backend
    from ipu_autotune.backends.estimate import EstimateBackend

    class SleepyBackend(Backend):
        """The estimator, after a sleep: a stand-in for a long compile."""

        name = "sleepy"
        source = "estimate"

        def __init__(self) -> None:
            self.inner = EstimateBackend()
            self.current: int | None = None

        def measure(self, problem: Any, config: Any) -> Any:
            print(f"MEASURING {self.current}", flush=True)
            time.sleep(seconds)
            return self.inner.measure(problem, config)

    return SleepyBackend()


def worker(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("storage")
    ap.add_argument("study")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds each measurement takes")
    ap.add_argument(
        "--grace", type=float, default=None, help="interrupt grace (default: let it finish)"
    )
    ap.add_argument("--heartbeat", type=int, default=None)
    ap.add_argument(
        "--warm-starts", type=int, default=2, help="enqueued configs when creating the study"
    )
    args = ap.parse_args(argv)

    import optuna

    from ipu_autotune.guide.proposal import Proposal
    from ipu_autotune.guide.warmstart import naive_baseline
    from ipu_autotune.profiles.trace import profile_for
    from ipu_autotune.search.space import SearchSpace
    from ipu_autotune.study import records as st
    from ipu_autotune.study.runner import Runner
    from ipu_autotune.study.storage import HEARTBEAT_INTERVAL_S, open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    p = problem()
    profile = profile_for(p)
    space = SearchSpace.load(p)
    storage = open_storage(args.storage, args.heartbeat or HEARTBEAT_INTERVAL_S)
    base = naive_baseline(p, profile)
    starts = [Proposal(base, "baseline"), Proposal(base.replace(precision="16.16"), "fp16")][
        : args.warm_starts
    ]

    def on_create(study: Any) -> None:
        study.set_user_attr(st.ATTR_SPACE, space.to_dict())
        st.enqueue(study, space, p, profile, starts)

    study, created = st.open_study(storage, args.study, p, None, on_create, args.heartbeat)
    backend = _sleepy_backend(args.sleep)
    runner = Runner(study, p, profile, space, backend, interrupt_grace_s=args.grace)
    original_ask = study.ask

    def ask(*a: Any, **k: Any) -> Any:
        trial = original_ask(*a, **k)
        backend.current = trial.number
        return trial

    study.ask = ask  # type: ignore[method-assign]  # the worker reports each trial it asks for
    runner.observers.append(lambda r: print(f"DONE {r.number} {r.state} {r.origin}", flush=True))
    print(f"READY created={created}", flush=True)
    try:
        with runner.stop_on_signals(lambda signum: print("STOPPING", flush=True)):
            runner.run(args.trials)
    except KeyboardInterrupt:
        print("QUIT", flush=True)
        return 130
    return 130 if runner.stop_requested else 0


if __name__ == "__main__":
    sys.path.insert(0, str(TESTS))
    sys.exit(worker())
