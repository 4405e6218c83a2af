"""The study: storage, resume, warm starts and the ask/measure/tell loop.

Scoring (DESIGN.md): each trial sets a graded memory constraint (how far over the busiest
tile's capacity, as a fraction) and reports throughput as its value, so Optuna's
constrained TPE learns how far from feasible a candidate is, and `study.best_trial` is
always a configuration that fits. An OOM is a completed, infeasible trial; a crash,
timeout or compile error is a failed trial; nothing the rules reject reaches a backend.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
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
from .search.space import SearchSpace
from .warmstart import Proposal

if TYPE_CHECKING:
    from .guide import Guide

ATTR_PROBLEM = "problem"
ATTR_VERSION = "ipu_autotune_version"
ATTR_SPACE = "search_space"
ATTR_NUMERICS = "numerics"  # the numerics advice the study applies


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
        if "config" not in t.user_attrs or "measurement" not in t.user_attrs:
            return None
        return cls(
            number=t.number,
            config=Config.from_dict(t.user_attrs["config"], f"trial {t.number} config"),
            measurement=Measurement.from_dict(t.user_attrs["measurement"]),
            origin=t.user_attrs.get("origin", "sampled"),
            state=t.state.name,
            seconds=t.user_attrs.get("seconds", 0.0),
        )


def create_sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Multivariate TPE models the knobs jointly (precision and memory levers interact);
        # group handles the conditional knobs; constant liar keeps parallel workers apart.
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=10,
        )


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


def load_existing(storage, name: str) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def open_study(storage, name: str, problem: Problem, seed: int | None,
               on_create: Callable[[optuna.Study], None]) -> tuple[optuna.Study, bool]:
    """Load the study, checking its problem, or create it and run `on_create` once.

    Only the worker that creates the study enqueues the warm starts, so workers that
    start together do not duplicate them.
    """
    sampler = create_sampler(seed)
    existing = load_existing(storage, name)
    if existing is not None:
        check_same_problem(existing, problem)
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler), False
    try:
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                    direction="maximize")
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        check_same_problem(study, problem)
        return study, False
    study.set_user_attr(ATTR_PROBLEM, problem.to_dict())
    study.set_user_attr(ATTR_VERSION, __version__)
    on_create(study)
    return study, True


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


def closest_record(study: optuna.Study) -> TrialRecord | None:
    """When nothing fits: the completed trial nearest to fitting."""
    done = [r for r in records(study) if r.state == "COMPLETE"]
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
    _measured: list[tuple[Config, Measurement]] | None = None

    def _history(self) -> list[tuple[Config, Measurement]]:
        if self._measured is None:
            self._measured = [(r.config, r.measurement) for r in records(self.study)]
        return self._measured

    def _enqueue_guided(self) -> None:
        """Before asking the sampler, let the guide propose (once the warm starts are done)."""
        if self.guide is None or self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        history = self._history()
        tried = {c for c, _ in history}
        config = self.guide.propose(history, tried)
        if config is not None:
            origin = f"guided (memory x{self.guide.correction:.2f})"
            enqueue(self.study, self.space, self.problem, self.profile, [Proposal(config, origin)])

    def config_for(self, trial: optuna.Trial) -> tuple[Config, str]:
        sampled = self.space.sample(trial, self.problem, self.profile)
        enqueued = trial.user_attrs.get("enqueued_config")
        if enqueued is not None:
            return Config.from_dict(enqueued, "enqueued config"), trial.user_attrs.get("origin", "enqueued")
        if self.adjust is not None:
            sampled = self.adjust(sampled)
        return sampled, "sampled"

    def run_one(self) -> TrialRecord:
        self._enqueue_guided()
        trial = self.study.ask()
        start = time.perf_counter()
        config, origin = self.config_for(trial)
        found = violations(self.problem, config, self.profile.module_order)
        if found:
            # Never reaches a backend. Only a user-written space or baseline can get here.
            measurement = failed("invalid", found[0], source="estimate")
        else:
            measurement = self.backend.measure(self.problem, config)
        return self.record(trial, config, origin, measurement, time.perf_counter() - start)

    def record(self, trial: optuna.Trial, config: Config, origin: str, m: Measurement,
               seconds: float) -> TrialRecord:
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("measurement", _jsonable(m.to_dict()))
        trial.set_user_attr("origin", origin)
        trial.set_user_attr("seconds", round(seconds, 4))
        if m.failure in (None, "oom"):
            trial.set_constraint("memory", float(m.violation))
            value = m.throughput if m.throughput is not None and math.isfinite(m.throughput) else 0.0
            self.study.tell(trial, value)
            state = "COMPLETE"
        else:
            trial.set_user_attr("failure", f"{m.failure}: {m.reason}")
            self.study.tell(trial, state=TrialState.FAIL)
            state = "FAIL"
        rec = TrialRecord(trial.number, config, m, origin, state, seconds)
        if self._measured is not None:
            self._measured.append((config, m))
        for observe in self.observers:
            observe(rec)
        return rec

    def run(self, n_trials: int, timeout_s: float | None = None) -> list[TrialRecord]:
        done: list[TrialRecord] = []
        start = time.monotonic()
        while len(done) < n_trials and not self.stop_requested:
            if timeout_s is not None and time.monotonic() - start >= timeout_s:
                break
            done.append(self.run_one())
        return done


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """Storage attributes must be JSON: round-trip to drop numpy scalars and tuples."""
    return json.loads(json.dumps(d, default=float))
