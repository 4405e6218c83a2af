"""The study: storage, resume, warm starts and the ask/measure/tell loop.

Scoring (DESIGN.md): each trial sets a graded memory constraint (how far over the busiest
tile's capacity, as a fraction) and reports throughput as its value, so Optuna's
constrained TPE learns how far from feasible a candidate is, and `study.best_trial` is
always a configuration that fits. An OOM is a completed, infeasible trial; a crash,
timeout or compile error is a failed trial; nothing the rules reject reaches a backend.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from . import __version__
from .backends.base import Backend, Measurement, failed
from .errors import UsageError
from .models.trace import ModelProfile
from .problem import Config, Problem
from .rules import violations
from .search.names import old_names
from .search.space import SearchSpace
from .search.window import DEFAULT_WINDOW, WindowedTPESampler
from .storage import Heartbeat, heartbeat_interval, retry_trial, set_heartbeat
from .warmstart import Proposal

if TYPE_CHECKING:
    from .guide import Guide

ATTR_PROBLEM = "problem"
ATTR_VERSION = "ipu_autotune_version"
ATTR_SPACE = "search_space"
ATTR_NUMERICS = "numerics"  # the numerics advice the study applies
ATTR_HEARTBEAT = "heartbeat_s"  # seconds between a worker's beats; set when the study is created
#: a trial's one user attribute: {"config": the complete Config, "measurement": the Measurement
#: (with "details"), "origin", "seconds"}; one storage write per trial (README, "Reading a study")
ATTR_RECORD = "record"
#: Optuna's constraint as a list under one system attribute: what `study.best_trial`
#: (optuna/study/_constrained_optimization.py, `_get_constraints_from_system_attrs`, the "old
#: format"), the samplers and optuna-dashboard (`_serializer.serialize_frozen_trial`) all read.
#: `trial.set_constraint` writes `constraints:<key>` instead, which the dashboard shows as none.
CONSTRAINTS_KEY = "constraints"

#: after a stop request, the running trial gets this long to finish before it is interrupted
INTERRUPT_GRACE_S = 10.0
#: how long a worker waits for another worker that is creating the same study
READY_TIMEOUT_S = 300.0


class TrialInterrupted(KeyboardInterrupt):
    """Raised into a measurement whose grace period after a stop request ran out."""


@dataclass
class TrialRecord:
    """One finished trial as the UI and the export see it."""

    number: int
    config: Config
    measurement: Measurement
    origin: str
    state: str  # COMPLETE | FAIL
    seconds: float = 0.0

    @property
    def feasible(self) -> bool:
        return self.state == "COMPLETE" and self.measurement.feasible

    @classmethod
    def from_trial(cls, t: FrozenTrial) -> "TrialRecord | None":
        rec = trial_attrs(t)
        if "config" not in rec or "measurement" not in rec:
            return None
        return cls(
            number=t.number,
            config=Config.from_dict(rec["config"], f"trial {t.number} config"),
            measurement=Measurement.from_dict(rec["measurement"]),
            origin=rec.get("origin", "sampled"),
            state=t.state.name,
            seconds=rec.get("seconds", 0.0),
        )


def trial_attrs(t: FrozenTrial) -> dict[str, Any]:
    """A trial's ATTR_RECORD ({config, measurement (with details), origin, seconds}), also
    from studies written before it existed (one user attribute per field)."""
    rec = t.user_attrs.get(ATTR_RECORD)
    if isinstance(rec, dict):
        return rec
    old = t.user_attrs
    out: dict[str, Any] = {k: old[k] for k in ("config", "origin", "seconds") if k in old}
    if "measurement" in old:
        out["measurement"] = {**old["measurement"], "details": old.get("details", {})}
    elif "failure" in old:  # abandoned before it was measured
        kind, _, reason = str(old["failure"]).partition(": ")
        out["measurement"] = {"feasible": False, "source": "estimate", "failure": old.get("reason", kind),
                              "reason": reason}
    return out


def create_sampler(seed: int | None, window: int | None = DEFAULT_WINDOW) -> optuna.samplers.BaseSampler:
    """`window`: finished trials the sampler models at most (search/window.py), so its cost
    stops growing with the study; None: every trial (Optuna's TPESampler as is)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Multivariate TPE models the knobs jointly (precision and memory levers interact);
        # group handles the conditional knobs; constant liar keeps parallel workers apart.
        options = dict(seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=10)
        if window is None:
            return optuna.samplers.TPESampler(**options)
        return WindowedTPESampler(**options, window=window)


def stored_problem(study: optuna.Study) -> Problem | None:
    raw = study.user_attrs.get(ATTR_PROBLEM)
    return Problem.from_dict(raw, "stored problem") if raw else None


def check_same_problem(study: optuna.Study, problem: Problem) -> None:
    stored = stored_problem(study)
    if stored is None:
        raise UsageError(f"study '{study.study_name}' was not made by ipu-autotune; "
                         "choose another --study name")
    if stored != problem:
        a, b = stored.to_dict(), problem.to_dict()
        diffs = [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        raise UsageError(f"study '{study.study_name}' holds a different problem ({'; '.join(diffs)}); "
                         "resume with the same options or pick a new --study name")
    old = old_names({p for t in study.get_trials(deepcopy=False) for p in t.params})
    if old:
        raise UsageError(f"study '{study.study_name}' was written by an older ipu-autotune (parameter "
                         f"'{old[0]}' has since been renamed): its sampler cannot learn from it; show, "
                         "export and report still read it; resume under a new --study name")


def load_existing(storage, name: str) -> optuna.Study | None:
    """The study, once its creator has finished setting it up (another worker may be at it)."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    _wait_until_ready(study)
    return study


def _wait_until_ready(study: optuna.Study) -> None:
    """A creating worker writes the problem first and the version last (after the warm starts)."""
    start = time.monotonic()
    while ATTR_VERSION not in study.user_attrs:
        waited = time.monotonic() - start
        if ATTR_PROBLEM not in study.user_attrs and (waited > 5.0 or study.get_trials(deepcopy=False)):
            return  # not an ipu-autotune study (ours get the problem before any trial): check_same_problem says so
        if waited > READY_TIMEOUT_S:
            raise UsageError(f"study '{study.study_name}' is still unfinished after {READY_TIMEOUT_S:.0f} s: "
                             "the worker creating it stopped half-way; delete it "
                             f"(optuna delete-study --study-name {study.study_name} --storage URL) "
                             "or choose another --study name")
        time.sleep(0.2)


def open_study(storage, name: str, problem: Problem, seed: int | None,
               on_create: Callable[[optuna.Study], None],
               heartbeat_s: int | None = None) -> tuple[optuna.Study, bool]:
    """Load the study, checking its problem, or create it and run `on_create` once.

    Only the worker that creates the study enqueues the warm starts, so workers that
    start together do not duplicate them; the others wait until it is ready. A creation
    that fails (bad input found by `on_create`, Ctrl-C) removes the half-made study.
    """
    sampler = create_sampler(seed)
    if load_existing(storage, name) is None:
        try:
            study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                        direction="maximize")
        except optuna.exceptions.DuplicatedStudyError:
            pass  # another worker won the race: load it below, once it is ready
        else:
            try:
                study.set_user_attr(ATTR_PROBLEM, problem.to_dict())
                if heartbeat_s is not None:
                    study.set_user_attr(ATTR_HEARTBEAT, int(heartbeat_s))
                on_create(study)
                study.set_user_attr(ATTR_VERSION, __version__)  # last: the study is ready
            except BaseException:
                with contextlib.suppress(Exception):
                    optuna.delete_study(study_name=name, storage=storage)
                raise
            return study, True
    existing = load_existing(storage, name)
    if existing is None:  # deleted by its creator meanwhile
        raise UsageError(f"study '{name}' was removed while this worker waited for it; run again")
    check_same_problem(existing, problem)
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler), False


def check_space(space: SearchSpace, problem: Problem, profile: ModelProfile, samples: int = 128) -> None:
    """Sample the space with random answers before any study exists, so that a space leaving
    some knob no valid value fails as bad input (UsageError) instead of half-way through a study."""
    rng = random.Random(0)
    for _ in range(samples):
        space.sample(_RandomAnswers(rng), problem, profile)


class _RandomAnswers:
    """A stand-in trial answering every suggest_* at random."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def suggest_categorical(self, name, choices):
        return self.rng.choice(list(choices))

    def suggest_int(self, name, low, high, log=False, step=1):
        return self.rng.randrange(low, high + 1, step or 1)

    def suggest_float(self, name, low, high, log=False, step=None):
        if step:
            return low + step * self.rng.randint(0, int(round((high - low) / step)))
        return self.rng.uniform(low, high)


def enqueue(study: optuna.Study, space: SearchSpace, problem: Problem, profile: ModelProfile,
            items: list[Proposal]) -> None:
    for p in items:
        study.enqueue_trial(space.params_for(problem, profile, p.config),
                            user_attrs={"origin": p.origin, "enqueued_config": p.config.to_dict()},
                            skip_if_exists=False)


def records(study: optuna.Study) -> list[TrialRecord]:
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        r = TrialRecord.from_trial(t)
        if r is not None:
            out.append(r)
    return out


def best_record(study: optuna.Study) -> TrialRecord | None:
    try:
        return TrialRecord.from_trial(study.best_trial)
    except ValueError:  # nothing feasible yet
        return None


def closest_record(recs: list[TrialRecord]) -> TrialRecord | None:
    """When nothing fits: the completed trial nearest to fitting."""
    done = [r for r in recs if r.state == "COMPLETE"]
    return min(done, key=lambda r: r.measurement.violation, default=None)


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
    guide: "Guide | None" = None  # estimator-guided proposals for compiling backends
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
            set_heartbeat(self.study._storage, stored)  # every worker judges staleness alike

    def _history(self) -> list[tuple[Config, Measurement]]:
        finished = len(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)))
        if self._measured is None or finished != self._history_size:  # other workers finished trials too
            self._measured = [(r.config, r.measurement) for r in records(self.study)]
            self._history_size = finished
        return self._measured

    def _enqueue_guided(self) -> None:
        """Before asking the sampler, let the guide propose (once the warm starts are done)."""
        if self.guide is None or self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        history = self._history()
        tried = {c for c, _ in history}
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        for t in running:
            if "enqueued_config" in t.user_attrs:  # another worker is compiling it: don't propose it twice
                tried.add(Config.from_dict(t.user_attrs["enqueued_config"], "enqueued config"))
        config = self.guide.propose(history, tried, running=len(running))
        if config is not None:
            origin = f"guided (memory x{self.guide.correction:.2f})"
            enqueue(self.study, self.space, self.problem, self.profile, [Proposal(config, origin)])

    def config_for(self, trial: optuna.Trial) -> tuple[Config, str]:
        """The trial's Config, always inside the space: the one place that enforces it.

        A config the sampler did not produce (enqueued warm starts and guided proposals,
        numerics-adjusted samples) is checked; one with a knob outside the space is replaced
        by its projection into the space. The baseline is the user's own starting point:
        run as given, its origin names the knobs outside the space."""
        sampled = self.space.sample(trial, self.problem, self.profile)
        enqueued = trial.user_attrs.get("enqueued_config")
        if enqueued is not None:
            config, origin = Config.from_dict(enqueued, "enqueued config"), trial.user_attrs.get("origin", "enqueued")
        elif self.adjust is not None:
            config, origin = self.adjust(sampled), "sampled"
        else:
            return sampled, "sampled"
        out = self.space.outside(self.problem, self.profile, config)
        if not out:
            return config, origin
        if origin.startswith("baseline"):
            return config, origin if "outside" in origin else f"{origin} (outside your space: {', '.join(out)})"
        moved = self.space.project(self.problem, self.profile, config)
        if self.space.outside(self.problem, self.profile, moved):
            moved = sampled  # the projection broke a dependency: the sampler's own config is inside
        return moved, origin if origin == "sampled" else f"{origin}, moved into your space"

    def run_one(self) -> TrialRecord:
        self._fail_stale()
        self._enqueue_guided()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "heartbeat is meant for optimize()": we beat ourselves
            trial = self.study.ask()
        if self._heartbeat is not None:
            self._heartbeat.track(trial._trial_id)
        start = time.perf_counter()
        config: Config | None = None
        origin = "sampled"
        try:
            config, origin = self.config_for(trial)
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
        except BaseException as exc:  # a bug, or a space that leaves a knob no value: never leave it RUNNING
            self._abandon(trial, "error", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            if self._heartbeat is not None:
                self._heartbeat.track(None)
        return self.record(trial, config, origin, measurement, time.perf_counter() - start)

    def record(self, trial: optuna.Trial, config: Config, origin: str, m: Measurement,
               seconds: float) -> TrialRecord:
        trial.set_user_attr(ATTR_RECORD, _jsonable({
            "config": config.to_dict(), "measurement": {**m.to_dict(), "details": m.details},
            "origin": origin, "seconds": round(seconds, 4)}))
        if m.failure in (None, "oom"):
            self.study._storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_KEY, [float(m.violation)])
            # A configuration that does not fit trains at 0 samples/s: so the best by value
            # (optuna-dashboard, `storage.get_best_trial`) is always one that fits.
            fits = m.feasible and m.throughput is not None and math.isfinite(m.throughput)
            self.study.tell(trial, m.throughput if fits else 0.0)
            state = "COMPLETE"
        else:
            self.study.tell(trial, state=TrialState.FAIL)
            state = "FAIL"
        rec = TrialRecord(trial.number, config, m, origin, state, seconds)
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

        def handler(signum, frame):
            if self.request_stop() and on_stop is not None:
                on_stop(signum)

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

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
        if (self._grace_armed or self.interrupt_grace_s is None or not hasattr(signal, "setitimer")
                or threading.current_thread() is not threading.main_thread()):
            return
        self._previous_alarm = signal.signal(signal.SIGALRM, self._grace_over)
        signal.setitimer(signal.ITIMER_REAL, max(float(self.interrupt_grace_s), 0.001))
        self._grace_armed = True

    def _disarm_grace(self) -> None:
        if self._grace_armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous_alarm or signal.SIG_DFL)
            self._grace_armed = False

    def _grace_over(self, signum, frame) -> None:
        if self._measuring:
            raise TrialInterrupted(f"no result {self.interrupt_grace_s:g} s after the stop request")

    def _interrupted(self, trial: optuna.Trial, config: Config, origin: str, seconds: float) -> TrialRecord:
        """Record the trial as failed (reason "interrupted") and enqueue its parameters again,
        so a resumed or concurrent worker measures it: an interrupt loses no configuration."""
        m = failed("interrupted", "stopped (Ctrl-C or SIGTERM) before its measurement finished",
                   source=self.backend.source)
        asked = trial.user_attrs  # before `record` overwrites the origin
        again = {k: asked[k] for k in ("origin", "enqueued_config") if k in asked}
        rec = self.record(trial, config, f"{origin}, interrupted", m, seconds)
        with contextlib.suppress(Exception):
            retry_trial(self.study, self.study._storage.get_trial(trial._trial_id), again)
        return rec

    def _abandon(self, trial: optuna.Trial, reason: str, detail: str) -> None:
        """Tell a trial that cannot be measured as failed, so none is left RUNNING."""
        with contextlib.suppress(Exception):
            # "error" is no Measurement failure kind: written as data, never measured
            m = Measurement(feasible=False, source=self.backend.source, failure=reason, reason=detail[:500])
            origin = trial.user_attrs.get("origin", "sampled")
            trial.set_user_attr(ATTR_RECORD, {"measurement": m.to_dict(), "origin": origin})
            self.study.tell(trial, state=TrialState.FAIL)

    # --- crashed workers ----------------------------------------------------------------------

    def _fail_stale(self) -> None:
        """Fail trials whose worker stopped beating (they are enqueued again by the storage's
        retry callback), at most once per heartbeat interval; start this worker's heartbeat."""
        interval = heartbeat_interval(self.study._storage)
        if interval is None:
            return
        if self._heartbeat is None:
            self._heartbeat = Heartbeat(self.study._storage)
        now = time.monotonic()
        if now - self._stale_checked < interval:
            return
        self._stale_checked = now
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optuna.storages.fail_stale_trials(self.study)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """Storage attributes must be JSON: round-trip to drop numpy scalars and tuples."""
    return json.loads(json.dumps(d, default=float))
