"""The Runner: the ask/measure/tell loop of one study, and how it stops.

Each trial is asked from the study (a queued warm start or the sampler), checked against
the rules (nothing they reject reaches a backend), measured, and told with its graded memory
constraint (records.py's docstring: the scoring). A stop request (Ctrl-C, SIGTERM) lets the
running measurement finish for a grace period, then records it as interrupted and enqueues
it again, so a resumed study runs it once more.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import optuna
from optuna.trial import TrialState

from ..backends.base import Backend, Measurement, failed
from ..guide.proposal import History, Proposal, Proposer
from ..guide.warmstart import is_baseline
from ..optuna_private import study_storage, trial_id
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..rules.cross_field import violations
from ..search.space import SearchSpace
from . import stop_signals
from .deferred_writes import flush as flush_held
from .records import ATTR_HEARTBEAT, ATTR_RECORD, TrialRecord, enqueue, records
from .storage import Heartbeat, heartbeat_interval, retry_trial, set_heartbeat

#: Optuna's constraint as a list under one system attribute: what `study.best_trial`
#: (optuna/study/_constrained_optimization.py, `_get_constraints_from_system_attrs`, the "old
#: format"), the samplers and optuna-dashboard (`_serializer.serialize_frozen_trial`) all read.
#: `trial.set_constraint` writes `constraints:<key>` instead, which the dashboard shows as none.
CONSTRAINTS_KEY = "constraints"

#: after a stop request, the running trial gets this long to finish before it is interrupted
INTERRUPT_GRACE_S = 10.0


class TrialInterrupted(KeyboardInterrupt):
    """Raised into a measurement whose grace period after a stop request ran out."""


@dataclass
class Runner:
    """Runs trials of one study. `observers` get each TrialRecord as it finishes."""

    study: optuna.Study
    problem: Problem
    profile: ModelProfile
    space: SearchSpace
    backend: Backend
    observers: list[Callable[[TrialRecord], None]] = field(default_factory=list)
    adjust: Callable[[Config], Config] | None = None  # e.g. numerics advice
    guide: Proposer | None = None  # estimator-guided proposals for compiling backends
    last_proposal: Proposal | None = None  # the guide's, before the last trial was asked
    guide_stop: Any = (
        None  # the guide's stopping rule then (guide/stopping.Stop), None while compiles pay
    )
    stop_requested: bool = False
    #: after a stop request the running measurement gets this long, then is interrupted
    #: (recorded as failed, reason "interrupted", and enqueued again); None: let it finish
    interrupt_grace_s: float | None = INTERRUPT_GRACE_S
    _measured: list[tuple[Config, Measurement]] | None = None
    _history_size: int = -1
    _measuring: bool = False
    _quit: bool = False
    _grace_armed: bool = False
    _previous_alarm: Any = None
    _heartbeat: Heartbeat | None = None
    _stale_checked: float = -math.inf

    def __post_init__(self) -> None:
        stored = self.study.user_attrs.get(ATTR_HEARTBEAT)
        if isinstance(stored, int) and not isinstance(stored, bool) and stored > 0:
            set_heartbeat(study_storage(self.study), stored)  # every worker judges staleness alike

    def _history(self) -> list[tuple[Config, Measurement]]:
        finished = len(
            self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        )
        if (
            self._measured is None or finished != self._history_size
        ):  # other workers finished trials too
            self._measured = [(r.config, r.measurement) for r in records(self.study)]
            self._history_size = finished
        return self._measured

    def _enqueue_guided(self) -> None:
        """Before asking the sampler, let the guide propose (once the warm starts are done)."""
        if self.guide is None or self.study.get_trials(
            deepcopy=False, states=(TrialState.WAITING,)
        ):
            return
        history = self._history()
        tried = {c for c, _ in history}
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        for t in running:
            if (
                "enqueued_config" in t.user_attrs
            ):  # another worker is compiling it: don't propose it twice
                tried.add(Config.from_dict(t.user_attrs["enqueued_config"], "enqueued config"))
        asked = History(list(history), tried, len(running), self.would_compile)  # as it is now
        self.last_proposal = self.guide.propose(asked)
        self.guide_stop = self.guide.stopping(asked)  # as that proposal judged it
        if self.last_proposal is not None:
            enqueue(self.study, self.space, self.problem, self.profile, [self.last_proposal])

    def would_compile(self, config: Config) -> bool:
        """Whether the backend would compile `config` (a screen may answer it without one)."""
        return self.backend.would_compile(self.problem, config)

    def config_for(self, trial: optuna.Trial) -> tuple[Config, str]:
        """The trial's Config, always inside the space: the one place that enforces it.

        A config the sampler did not produce (enqueued warm starts and guided proposals,
        numerics-adjusted samples) is checked; one with a knob outside the space is replaced
        by its projection into the space. The baseline is the user's own starting point:
        run as given, its origin names the knobs outside the space."""
        sampled = self.space.sample(trial, self.problem, self.profile)
        enqueued = trial.user_attrs.get("enqueued_config")
        if enqueued is not None:
            config, origin = (
                Config.from_dict(enqueued, "enqueued config"),
                trial.user_attrs.get("origin", "enqueued"),
            )
        elif self.adjust is not None:
            config, origin = self.adjust(sampled), "sampled"
        else:
            return sampled, "sampled"
        out = self.space.outside(self.problem, self.profile, config)
        if not out:
            return config, origin
        if is_baseline(origin):
            return (
                config,
                origin
                if "outside" in origin
                else f"{origin} (outside your space: {', '.join(out)})",
            )
        moved = self.space.project(self.problem, self.profile, config)
        if self.space.outside(self.problem, self.profile, moved):
            moved = (
                sampled  # the projection broke a dependency: the sampler's own config is inside
            )
        return moved, origin if origin == "sampled" else f"{origin}, moved into your space"

    def run_one(self) -> TrialRecord:
        self._fail_stale()
        self._enqueue_guided()
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # "heartbeat is meant for optimize()": we beat ourselves
            trial = self.study.ask()
        if self._heartbeat is not None:
            self._heartbeat.track(trial_id(trial))
        start = time.perf_counter()
        config: Config | None = None
        origin = "sampled"
        try:
            config, origin = self.config_for(trial)
            # the sampled parameters in one write, before the measurement: other workers'
            # constant liar and a stale-trial retry read them (the rest goes with the tell:
            # deferred_writes.py)
            flush_held(study_storage(self.study), trial_id(trial))
            found = violations(self.problem, config, self.profile.module_order)
            if found:
                # Never reaches a backend. Only a user-written space or baseline can get here.
                measurement = failed("invalid", found[0], source="estimate")
            else:
                measurement = self._measure(config)
        except KeyboardInterrupt as exc:  # a second Ctrl-C, or the grace after the first ran out
            if config is None:
                self._abandon(trial, "interrupted", "stopped before its configuration was chosen")
                raise
            rec = self._interrupted(trial, config, origin, time.perf_counter() - start)
            if isinstance(exc, TrialInterrupted):
                return rec
            raise
        except (
            BaseException
        ) as exc:  # a bug, or a space that leaves a knob no value: never leave it RUNNING
            self._abandon(trial, "error", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            if self._heartbeat is not None:
                self._heartbeat.track(None)
        return self.record(trial, config, origin, measurement, time.perf_counter() - start)

    def record(
        self, trial: optuna.Trial, config: Config, origin: str, m: Measurement, seconds: float
    ) -> TrialRecord:
        trial.set_user_attr(
            ATTR_RECORD,
            _jsonable(
                {
                    "config": config.to_dict(),
                    "measurement": {**m.to_dict(), "details": m.details},
                    "origin": origin,
                    "seconds": round(seconds, 4),
                }
            ),
        )
        if m.failure in (None, "oom"):
            study_storage(self.study).set_trial_system_attr(
                trial_id(trial), CONSTRAINTS_KEY, [float(m.violation)]
            )
            # A configuration that does not fit trains at 0 samples/s: so the best by value
            # (optuna-dashboard, `storage.get_best_trial`) is always one that fits.
            fits = m.feasible and m.throughput is not None and math.isfinite(m.throughput)
            self.study.tell(trial, m.throughput if fits else 0.0)
            state = "COMPLETE"
        else:
            self.study.tell(trial, state=TrialState.FAIL)
            state = "FAIL"
        rec = TrialRecord(
            trial.number,
            config,
            m,
            origin,
            state,
            seconds,
            TrialRecord.reason_of(trial.user_attrs),
        )
        if self._measured is not None:
            self._measured.append((config, m))
            self._history_size += 1
        for observe in self.observers:
            observe(rec)
        return rec

    def run(self, n_trials: int, timeout_s: float | None = None) -> list[TrialRecord]:
        done: list[TrialRecord] = []
        start = time.monotonic()
        try:
            while len(done) < n_trials and not self.stop_requested:
                if timeout_s is not None and time.monotonic() - start >= timeout_s:
                    break
                done.append(self.run_one())
                if self._quit:
                    raise KeyboardInterrupt
        finally:
            if self._heartbeat is not None:
                self._heartbeat.stop()
                self._heartbeat = None
        return done

    # --- stopping: Ctrl-C, SIGTERM ------------------------------------------------------------

    def request_stop(self) -> bool:
        """What a Ctrl-C or SIGTERM does. The first: no new trial starts, and the running one
        gets `interrupt_grace_s` to finish, after which it is recorded as failed (reason
        "interrupted") and enqueued again; returns True. The second: quit now (the running
        trial is recorded the same way first), raising KeyboardInterrupt; returns False when
        no trial is measuring (the loop quits as soon as the storage is consistent)."""
        if not self.stop_requested:
            self.stop_requested = True
            if self._measuring:
                self._arm_grace()
            return True
        self._quit = True
        if self._measuring:
            raise KeyboardInterrupt
        return False

    @contextlib.contextmanager
    def stop_on_signals(self, on_stop: Callable[[int], None] | None = None) -> Iterator[None]:
        """Route SIGINT and SIGTERM to `request_stop` (main thread only); `on_stop(signum)`
        is told of the first one, e.g. to print what happens next."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            if self.request_stop() and on_stop is not None:
                on_stop(signum)

        with stop_signals.handled(handler):
            yield

    def _measure(self, config: Config) -> Measurement:
        if self._quit:
            raise KeyboardInterrupt
        self._measuring = True
        try:
            if self.stop_requested:
                self._arm_grace()
            return self.backend.measure(self.problem, config)
        finally:
            self._measuring = False
            self._disarm_grace()

    def _arm_grace(self) -> None:
        if (
            self._grace_armed
            or self.interrupt_grace_s is None
            or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        self._previous_alarm = signal.signal(signal.SIGALRM, self._grace_over)
        signal.setitimer(signal.ITIMER_REAL, max(float(self.interrupt_grace_s), 0.001))
        self._grace_armed = True

    def _disarm_grace(self) -> None:
        if self._grace_armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous_alarm or signal.SIG_DFL)
            self._grace_armed = False

    def _grace_over(self, signum: int, frame: FrameType | None) -> None:
        if self._measuring:
            raise TrialInterrupted(
                f"no result {self.interrupt_grace_s:g} s after the stop request"
            )

    def _interrupted(
        self, trial: optuna.Trial, config: Config, origin: str, seconds: float
    ) -> TrialRecord:
        """Record the trial as failed (reason "interrupted") and enqueue its parameters again,
        so a resumed or concurrent worker measures it: an interrupt loses no configuration."""
        m = failed(
            "interrupted",
            "stopped (Ctrl-C or SIGTERM) before its measurement finished",
            source=self.backend.source,
        )
        asked = trial.user_attrs  # before `record` overwrites the origin
        again: dict[str, Any] = {k: asked[k] for k in ("origin", "enqueued_config") if k in asked}
        rec = self.record(trial, config, f"{origin}, interrupted", m, seconds)
        with contextlib.suppress(Exception):
            retry_trial(self.study, study_storage(self.study).get_trial(trial_id(trial)), again)
        return rec

    def _abandon(self, trial: optuna.Trial, reason: str, detail: str) -> None:
        """Tell a trial that cannot be measured as failed, so none is left RUNNING."""
        with contextlib.suppress(Exception):
            # "error" is no Measurement failure kind: written as data, never measured
            m = Measurement(
                feasible=False, source=self.backend.source, failure=reason, reason=detail[:500]
            )
            origin = trial.user_attrs.get("origin", "sampled")
            trial.set_user_attr(ATTR_RECORD, {"measurement": m.to_dict(), "origin": origin})
            self.study.tell(trial, state=TrialState.FAIL)

    # --- crashed workers ----------------------------------------------------------------------

    def _fail_stale(self) -> None:
        """Fail trials whose worker stopped beating (they are enqueued again by the storage's
        retry callback), at most once per heartbeat interval; start this worker's heartbeat."""
        interval = heartbeat_interval(study_storage(self.study))
        if interval is None:
            return
        if self._heartbeat is None:
            self._heartbeat = Heartbeat(study_storage(self.study))
        now = time.monotonic()
        if now - self._stale_checked < interval:
            return
        self._stale_checked = now
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optuna.storages.fail_stale_trials(self.study)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """Storage attributes must be JSON: round-trip to drop numpy scalars and tuples."""
    plain: dict[str, Any] = json.loads(json.dumps(d, default=float))
    return plain
