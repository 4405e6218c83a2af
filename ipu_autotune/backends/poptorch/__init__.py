"""The PopTorch backend: each trial compiled for real, in a fresh subprocess
(docs/poptorch-backend.md).

The parent writes a request, runs `child.py` in a new interpreter (spawned, never forked: a
fork would inherit PopTorch's globals) and in its own session (so a Ctrl-C reaches the tuner,
which finishes the trial, and a timeout can kill the whole process group), captures its
output in a per-trial log, and turns the child's `result.json` into a Measurement
(result.py). It never raises for a configuration: OOM, compile errors, timeouts and crashes
are all Measurements.

Per trial, in `<work_dir>/trial-NNNN/`: request.json, snippet.py (the exact code compiled),
options.txt (`repr(opts)`), trial.log, result.json (timings included) and
report/training/profile.pop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...export.python import render_snippet
from ...models import objects
from ...problem import Config, Problem
from ..base import Backend, Measurement, failed
from .errors import describe_exit, last_line, read_text
from .result import add_end_to_end, measurement_from_result

CHILD_MODULE = "ipu_autotune.backends.poptorch.child"
#: the package root, so a child on another interpreter can import ipu_autotune
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


class PopTorchBackend(Backend):
    """Compiles each configuration with PopTorch; times it where IPUs are attached."""

    name = "poptorch"
    source = "compile"

    def __init__(
        self,
        work_dir: str | Path,
        timeout_s: float = 3600.0,
        time_runs: bool = True,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        lr: float | None = None,
        cache_dir: str | Path | None = None,
        warmup_calls: int = 2,
        timed_calls: int = 5,
        kill_grace_s: float = 5.0,
    ):
        # Absolute: the child runs in its trial folder, where relative paths would not resolve.
        self.work_dir = Path(work_dir).resolve()
        self.timeout_s = float(timeout_s)
        self.time_runs = time_runs
        self.python = python
        self.env = dict(env or {})
        self.lr = lr
        # Shared by all trials: a repeated configuration loads instead of recompiling.
        self.cache_dir = (
            Path(cache_dir).resolve() if cache_dir else self.work_dir / "executable-cache"
        )
        self.warmup_calls = warmup_calls
        self.timed_calls = timed_calls
        self.kill_grace_s = kill_grace_s
        self.trials_started = 0
        self._lock = threading.Lock()
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._closed: set[int] = set()  # pids close() killed: "interrupted", not a crash
        self._pickled: set[str] = set()  # object models written to work_dir this run
        self._sdk: str | None = None  # the SDK label, once asked (sdk)

    @property
    def sdk(self) -> str | None:
        """`poptorch-<version>` of the interpreter the compiles run in, asked once of a child (the
        parent never imports PopTorch); each compile's result also says it (child.sdk_label)."""
        if self._sdk is None:
            code = (
                "import importlib, sys\n"
                "try:\n"
                "    m = importlib.import_module('poptorch')\n"
                "except Exception:\n"
                "    sys.exit(1)\n"
                "print('poptorch-' + str(getattr(m, '__version__', 'unknown')))"
            )
            try:
                out = subprocess.run(
                    [self.python, "-c", code],
                    env=self.child_env(),
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                self._sdk = (
                    out.stdout.strip().splitlines()[-1]
                    if out.returncode == 0 and out.stdout.strip()
                    else ""
                )
            except (OSError, subprocess.SubprocessError):
                self._sdk = ""
        return self._sdk or None

    def describe(self) -> str:
        return f"poptorch (compile in a subprocess, timeout {self.timeout_s:g} s)"

    # --- one trial ------------------------------------------------------------------------

    def measure(self, problem: Problem, config: Config) -> Measurement:
        trial_dir = self._new_trial_dir()
        log_path = trial_dir / "trial.log"
        try:
            request = self._write_request(trial_dir, problem, config)
        except Exception as exc:  # e.g. a value render_snippet refuses to export
            return failed(
                "invalid",
                f"cannot export this configuration: {exc}",
                artifact_dir=str(trial_dir),
                log=str(log_path),
            )
        start = time.perf_counter()
        try:
            outcome = self._run_child(trial_dir, log_path)
        except OSError as exc:  # the interpreter itself cannot start
            return failed(
                "crash",
                f"cannot start the trial process {self.python}: {exc.strerror or exc}",
                artifact_dir=str(trial_dir),
                log=str(log_path),
            )
        seconds = time.perf_counter() - start
        details = {
            "artifact_dir": str(trial_dir),
            "log": str(log_path),
            "seconds": round(seconds, 3),
            **outcome,
        }
        if outcome["closed"]:
            return failed(
                "interrupted",
                f"the tuner stopped while this trial ran (log: {log_path})",
                **details,
            )
        if outcome["timed_out"]:
            return failed(
                "timeout",
                f"no result after {self.timeout_s:g} s; the trial was killed (log: {log_path})",
                **details,
            )
        result_path = Path(request["result_path"])
        try:
            result = json.loads(result_path.read_text())
        except (OSError, ValueError):
            why = describe_exit(outcome["returncode"])
            hint = last_line(read_text(log_path))
            return failed(
                "crash",
                f"the trial process {why} without a result"
                + (f": {hint}" if hint else "")
                + f" (log: {log_path})",
                **details,
            )
        m = measurement_from_result(result, details, read_text(log_path))
        if m.source == "run" and m.throughput:
            add_end_to_end(m, problem, config)
        return m

    def _new_trial_dir(self) -> Path:
        """trial-0001, trial-0002, ...: mkdir is the lock, so concurrent tuners never share one."""
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"cannot create the trial folder {self.work_dir}: {exc.strerror}; "
                "choose a writable --out"
            ) from None
        with self._lock:
            n = self.trials_started
            while True:
                n += 1
                path = self.work_dir / f"trial-{n:04d}"
                try:
                    path.mkdir()
                except FileExistsError:
                    continue
                self.trials_started = n
                return path

    def _write_request(self, trial_dir: Path, problem: Problem, config: Config) -> dict[str, Any]:
        snippet = render_snippet(problem, config, summary=f"ipu-autotune trial {trial_dir.name}")
        snippet_path = trial_dir / "snippet.py"
        snippet_path.write_text(snippet)
        request = {
            "problem": problem.to_dict(),
            "config": config.to_dict(),
            "snippet_path": str(snippet_path),
            "artifact_dir": str(trial_dir),
            "report_dir": str(trial_dir / "report"),
            "cache_dir": str(self.cache_dir) if self.cache_dir else None,
            "result_path": str(trial_dir / "result.json"),
            "options_path": str(trial_dir / "options.txt"),
            "log_path": str(trial_dir / "trial.log"),
            "timeout_s": self.timeout_s,
            "time_runs": self.time_runs,
            "warmup_calls": self.warmup_calls,
            "timed_calls": self.timed_calls,
            "lr": self.lr,
        }
        if objects.is_object(problem.model):
            request["model_path"] = str(self._model_file(problem.model))
        (trial_dir / "request.json").write_text(json.dumps(request, indent=1))
        return request

    def _model_file(self, model: str) -> Path:
        """A model given as a Python object, pickled once for every trial's process: a fresh
        interpreter cannot rebuild it from its name (models/objects.py says what pickles)."""
        path = self.work_dir / f"{model.replace(':', '-')}.pkl"
        if model not in self._pickled:
            path.write_bytes(objects.pickled(model))
            self._pickled.add(model)
        return path

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Poplar lets this variable override our engine options: the profile would land
        # elsewhere, or profiling would add memory (reference §3.6). Only an explicit env wins.
        env.pop("POPLAR_ENGINE_OPTIONS", None)
        paths = [
            self.env.get("PYTHONPATH", ""),
            _PACKAGE_ROOT,
            os.getcwd(),
            os.environ.get("PYTHONPATH", ""),
        ]
        env.update({k: v for k, v in self.env.items() if k != "PYTHONPATH"})
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _run_child(self, trial_dir: Path, log_path: Path) -> dict[str, Any]:
        cmd = [self.python, "-m", CHILD_MODULE, str(trial_dir / "request.json")]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                cwd=trial_dir,
                env=self.child_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            with self._lock:
                self._running[proc.pid] = proc
            timed_out = False
            try:
                proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                self._kill(proc)
            except BaseException:  # Ctrl-C twice, SystemExit: never leave a compile behind
                self._kill(proc)
                raise
            finally:
                with self._lock:
                    self._running.pop(proc.pid, None)
                    closed = proc.pid in self._closed
                    self._closed.discard(proc.pid)
        return {
            "returncode": proc.returncode,
            "pid": proc.pid,
            "timed_out": timed_out,
            "closed": closed,
        }

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the whole group (the child and anything it started), then SIGKILL.

        SIGTERM first lets Poplar detach from the IPUs cleanly; SIGKILL after the grace
        period, and again once the leader is gone, for anything else left in its group.
        """
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.kill_grace_s)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        """Kill running trials (their measure() returns an 'interrupted' failure)."""
        with self._lock:
            running = list(self._running.values())
            self._closed.update(p.pid for p in running)
        for proc in running:
            self._kill(proc)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["PopTorchBackend", "measurement_from_result"]
