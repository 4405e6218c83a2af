"""The study: creation and resume in a storage, warm starts, and its trials as records.
The ask/measure/tell loop that runs its trials is `runner.py`.

Scoring: each trial sets a graded memory constraint (how far over the busiest
tile's capacity, as a fraction) and reports throughput as its value, so Optuna's
constrained TPE learns how far from feasible a candidate is, and `study.best_trial` is
always a configuration that fits. An OOM is a completed, infeasible trial; a crash,
timeout or compile error is a failed trial; nothing the rules reject reaches a backend.
"""

from __future__ import annotations

import contextlib
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from ..backends.base import Measurement
from ..errors import UsageError
from ..guide.proposal import Proposal
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..search.names import old_names
from ..search.space import SearchSpace
from ..search.window import DEFAULT_WINDOW, WindowedTPESampler
from ..version import __version__
from .record_schema import UnreadableRecord, check_record

ATTR_PROBLEM = "problem"
ATTR_VERSION = "ipu_autotune_version"
ATTR_SPACE = "search_space"
ATTR_NUMERICS = "numerics"  # the numerics advice the study applies
ATTR_HEARTBEAT = "heartbeat_s"  # seconds between a worker's beats; set when the study is created
#: trials the sampler draws at random before TPE models any (Optuna's default)
STARTUP_TRIALS = 10
#: a trial's one user attribute: {"config": the complete Config, "measurement": the Measurement
#: (with "details"), "origin", "seconds"}; one storage write per trial (README, "Reading a study")
ATTR_RECORD = "record"
#: an enqueued trial the guide chose: {"reason", "chance_to_fit", "expected_gain"}
#: (guide/proposal.py)
ATTR_PROPOSAL = "proposal"
#: how long a worker waits for another worker that is creating the same study
READY_TIMEOUT_S = 300.0


@dataclass
class TrialRecord:
    """One finished trial as the UI and the export see it."""

    number: int
    config: Config
    measurement: Measurement
    origin: str
    state: str  # COMPLETE | FAIL
    seconds: float = 0.0
    reason: str | None = (
        None  # why the guide chose it (guide/proposal.Reason's value); None: not the guide's
    )

    @staticmethod
    def reason_of(user_attrs: dict[str, Any]) -> str | None:
        """A trial's guide reason, from its user attributes (enqueue)."""
        stored = user_attrs.get(ATTR_PROPOSAL)
        reason = stored.get("reason") if isinstance(stored, dict) else None
        return reason if isinstance(reason, str) else None

    @property
    def feasible(self) -> bool:
        return self.state == "COMPLETE" and self.measurement.feasible

    @classmethod
    def from_trial(cls, t: FrozenTrial) -> TrialRecord | None:
        """None for a trial not yet measured; UnreadableRecord (one line naming the trial
        and the field) for a record that does not match the schema (record_schema.py)."""
        rec = trial_attrs(t)
        if "config" not in rec or "measurement" not in rec:
            return None
        config, measurement, origin, seconds = check_record(rec, t.number)
        return cls(
            number=t.number,
            config=config,
            measurement=measurement,
            origin=origin,
            state=t.state.name,
            seconds=seconds,
            reason=cls.reason_of(t.user_attrs),
        )


def trial_attrs(t: FrozenTrial) -> dict[str, Any]:
    """A trial's ATTR_RECORD ({config, measurement (with details), origin, seconds}), also
    from studies written before it existed (one user attribute per field)."""
    rec = t.user_attrs.get(ATTR_RECORD)
    if isinstance(rec, dict):
        return rec
    old = t.user_attrs
    out: dict[str, Any] = {k: old[k] for k in ("config", "origin", "seconds") if k in old}
    if isinstance(old.get("measurement"), dict):
        out["measurement"] = {**old["measurement"], "details": old.get("details", {})}
    elif "measurement" in old:  # not a table: the schema check says so
        out["measurement"] = old["measurement"]
    elif "failure" in old:  # abandoned before it was measured
        kind, _, reason = str(old["failure"]).partition(": ")
        out["measurement"] = {
            "feasible": False,
            "source": "estimate",
            "failure": old.get("reason", kind),
            "reason": reason,
        }
    return out


def create_sampler(
    seed: int | None, window: int | None = DEFAULT_WINDOW, startup_trials: int = STARTUP_TRIALS
) -> optuna.samplers.BaseSampler:
    """`window`: finished trials the sampler models at most (search/window.py), so its cost
    stops growing with the study; None: every trial (Optuna's TPESampler as is).
    `startup_trials`: trials sampled at random before TPE models any."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Multivariate TPE models the knobs jointly (precision and memory levers interact);
        # group handles the conditional knobs; constant liar keeps parallel workers apart.
        options: dict[str, Any] = dict(
            seed=seed,
            multivariate=True,
            group=True,
            constant_liar=True,
            n_startup_trials=startup_trials,
        )
        if window is None:
            return optuna.samplers.TPESampler(**options)
        return WindowedTPESampler(**options, window=window)


def stored_problem(study: optuna.Study) -> Problem | None:
    raw = study.user_attrs.get(ATTR_PROBLEM)
    return Problem.from_dict(raw, "stored problem") if raw else None


def check_same_problem(study: optuna.Study, problem: Problem) -> None:
    stored = stored_problem(study)
    if stored is None:
        raise UsageError(
            f"study '{study.study_name}' was not made by ipu-autotune; choose another --study name"
        )
    if stored != problem:
        a, b = stored.to_dict(), problem.to_dict()
        diffs = [
            f"{k} {a.get(k)!r} -> {b.get(k)!r}"
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ]
        raise UsageError(
            f"study '{study.study_name}' holds a different problem ({'; '.join(diffs)}); "
            "resume with the same options or pick a new --study name"
        )
    old = old_names({p for t in study.get_trials(deepcopy=False) for p in t.params})
    if old:
        raise UsageError(
            f"study '{study.study_name}' was written by an older ipu-autotune (parameter "
            f"'{old[0]}' has since been renamed): its sampler cannot learn from it; show, "
            "export and report still read it; resume under a new --study name"
        )


def load_existing(storage: BaseStorage, name: str) -> optuna.Study | None:
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
        if ATTR_PROBLEM not in study.user_attrs and (
            waited > 5.0 or study.get_trials(deepcopy=False)
        ):
            # not an ipu-autotune study (ours get the problem before any trial):
            # check_same_problem says so
            return
        if waited > READY_TIMEOUT_S:
            raise UsageError(
                f"study '{study.study_name}' is still unfinished after {READY_TIMEOUT_S:.0f} s: "
                "the worker creating it stopped half-way; delete it "
                f"(optuna delete-study --study-name {study.study_name} --storage URL) "
                "or choose another --study name"
            )
        time.sleep(0.2)


def open_study(
    storage: BaseStorage,
    name: str,
    problem: Problem,
    seed: int | None,
    on_create: Callable[[optuna.Study], None],
    heartbeat_s: int | None = None,
) -> tuple[optuna.Study, bool]:
    """Load the study, checking its problem, or create it and run `on_create` once.

    Only the worker that creates the study enqueues the warm starts, so workers that
    start together do not duplicate them; the others wait until it is ready. A creation
    that fails (bad input found by `on_create`, Ctrl-C) removes the half-made study.
    """
    sampler = create_sampler(seed)
    if load_existing(storage, name) is None:
        try:
            study = optuna.create_study(
                study_name=name, storage=storage, sampler=sampler, direction="maximize"
            )
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


def check_space(
    space: SearchSpace, problem: Problem, profile: ModelProfile, samples: int = 128
) -> None:
    """Sample the space with random answers before any study exists, so that a space leaving
    some knob no valid value fails as bad input (UsageError) instead of half-way through a
    study."""
    rng = random.Random(0)
    for _ in range(samples):
        space.sample(_RandomAnswers(rng), problem, profile)


class _RandomAnswers:
    """A stand-in trial answering every suggest_* at random."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self.rng.choice(list(choices))

    def suggest_int(self, name: str, low: int, high: int, log: bool = False, step: int = 1) -> int:
        return self.rng.randrange(low, high + 1, step or 1)

    def suggest_float(
        self, name: str, low: float, high: float, log: bool = False, step: float | None = None
    ) -> float:
        if step:
            return low + step * self.rng.randint(0, int(round((high - low) / step)))
        return self.rng.uniform(low, high)


def enqueue(
    study: optuna.Study,
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    items: list[Proposal],
) -> None:
    for p in items:
        attrs = {"origin": p.origin, "enqueued_config": p.config.to_dict()}
        if (
            p.reason is not None
        ):  # a guide's decision, as the trial line shows it (TrialRecord.reason)
            attrs[ATTR_PROPOSAL] = p.attrs()
        study.enqueue_trial(
            space.params_for(problem, profile, p.config), user_attrs=attrs, skip_if_exists=False
        )


def read_records(study: optuna.Study) -> tuple[list[TrialRecord], dict[int, str]]:
    """The finished trials' records, and by trial number a one-line reason for each trial
    whose record does not match the schema (left out, so the rest of the study still reads)."""
    out, unreadable = [], {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        try:
            r = TrialRecord.from_trial(t)
        except UnreadableRecord as exc:
            unreadable[t.number] = str(exc)
            continue
        if r is not None:
            out.append(r)
    return out, unreadable


def records(study: optuna.Study) -> list[TrialRecord]:
    """The readable finished trials (`read_records` also says why the others are left out)."""
    return read_records(study)[0]


def best_record(study: optuna.Study, skip_unreadable: bool = False) -> TrialRecord | None:
    """Optuna's best trial as a record. When its record is unreadable: UnreadableRecord, or
    with `skip_unreadable` (what displays want) the fastest readable trial that fits."""
    try:
        return TrialRecord.from_trial(study.best_trial)
    except ValueError:  # nothing feasible yet
        return None
    except UnreadableRecord:
        if not skip_unreadable:
            raise
    fits = [r for r in records(study) if r.feasible and r.measurement.throughput is not None]
    return max(fits, key=lambda r: cast(float, r.measurement.throughput), default=None)


def closest_record(recs: list[TrialRecord]) -> TrialRecord | None:
    """When nothing fits: the completed trial nearest to fitting."""
    done = [r for r in recs if r.state == "COMPLETE"]
    return min(done, key=lambda r: r.measurement.violation, default=None)


def uncertain_alternative(recs: list[TrialRecord], best: TrialRecord | None) -> TrialRecord | None:
    """A trial faster than the best that the estimate's error bar leaves uncertain: it may fit,
    with less chance than the study asks (Measurement.fit_chance under its fit_confidence).
    Of several, the likeliest to fit, then the fastest."""
    if best is None or best.measurement.throughput is None:
        return None
    fastest = best.measurement.throughput

    def uncertain(m: Measurement) -> bool:
        return (
            m.failure == "oom"
            and m.fit_chance is not None
            and m.fit_confidence is not None
            and 0 < m.fit_chance < m.fit_confidence
            and (m.throughput or 0) > fastest
        )

    faster = [r for r in recs if r.state == "COMPLETE" and uncertain(r.measurement)]
    return max(
        faster, key=lambda r: (r.measurement.fit_chance, r.measurement.throughput), default=None
    )
