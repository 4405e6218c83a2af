"""`tune --jobs N`: N trials at once on one host, one compile per worker process.

The process the user started creates the study (warm starts, numerics advice) as usual,
then starts N workers: `tune` itself, each given its options on stdin (the same options, one
job, its share of the trials, as a worker: no header, summary or files). They share the study's
storage like workers started by hand; constant-liar TPE and the guide (which skips the
configurations other workers are compiling) keep them apart. This process only watches
the storage and feeds finished trials, and the running ones, to the live view.

Ctrl-C and SIGTERM are passed on: the workers are in their own session, so a terminal's
Ctrl-C reaches them once, through this process. The first asks each worker to stop after its
trial (it gets the usual grace, then is recorded as interrupted and enqueued again); the
second makes them quit at once, still recording the running trial. No trial is left
RUNNING by a worker that exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from types import FrameType

import optuna
from optuna.trial import TrialState

from ..errors import UsageError
from . import stop_signals
from .record_schema import UnreadableRecord
from .records import TrialRecord
from .storage import in_memory

#: how often the watching process reads the storage (seconds)
POLL_S = 0.5


def check_jobs(jobs: int, storage_url: str) -> None:
    if jobs > 1 and in_memory(storage_url):
        raise UsageError(
            "--jobs needs a storage the worker processes share: use sqlite:///FILE (one host) "
            f"or journal:///FILE, not {storage_url}"
        )


def shares(trials: int, jobs: int) -> list[int]:
    """Trials per worker, as even as possible; workers with no trial are not started."""
    return [n for n in (trials // jobs + (i < trials % jobs) for i in range(jobs)) if n > 0]


class Workers:
    """Started worker processes and the signals passed on to them: one per input, each running
    `command` with its input on stdin."""

    def __init__(self, command: list[str], inputs: list[bytes]):
        self.procs = []
        for given in inputs:
            proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
            )
            assert proc.stdin is not None  # stdin=PIPE
            with proc.stdin:
                proc.stdin.write(given)
            self.procs.append(proc)
        self.stops = 0

    def signal_all(self, signum: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signum)

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def wait(self) -> list[int]:
        return [p.wait() for p in self.procs]

    @contextlib.contextmanager
    def pass_signals(self, on_stop: Callable[[int], None] | None = None) -> Iterator[None]:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.stops += 1
            if self.stops == 1 and on_stop is not None:
                on_stop(signum)
            self.signal_all(signal.SIGINT)

        with stop_signals.handled(handler):
            yield


def watch(
    study: optuna.Study,
    workers: Workers,
    observe: Callable[[TrialRecord], None],
    show_running: Callable[[list[int]], None] | None = None,
) -> list[TrialRecord]:
    """Until every worker exits: pass trials that finish (after this run started) to
    `observe` and the numbers of running ones to `show_running`; returns the finished ones."""
    seen = {
        t.number
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
    }
    done: list[TrialRecord] = []
    while True:
        alive = workers.running()
        trials = study.get_trials(deepcopy=False)
        for t in trials:
            if t.number not in seen and t.state in (TrialState.COMPLETE, TrialState.FAIL):
                try:
                    rec = TrialRecord.from_trial(t)
                except UnreadableRecord:  # written by someone else: not this run's trial to show
                    seen.add(t.number)
                    continue
                if rec is not None:
                    seen.add(t.number)
                    done.append(rec)
                    observe(rec)
        if show_running is not None:
            show_running([t.number for t in trials if t.state == TrialState.RUNNING])
        if not alive:
            return done
        time.sleep(POLL_S)
