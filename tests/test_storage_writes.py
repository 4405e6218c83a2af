"""A trial costs few storage writes (deferred_writes.py), and nothing reads behind them:
held writes are merged into reads of the trial, flushed before reads of the study, and
the trial record is read in both its layouts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from testing import RESNET18_CIFAR_1IPU as PROBLEM, not_none

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.search.window import WindowedTPESampler
from ipu_autotune.study.deferred_rdb import DeferredCachedStorage
from ipu_autotune.study.deferred_writes import DeferredTrialWrites
from ipu_autotune.study.records import ATTR_RECORD, TrialRecord, enqueue, open_study
from ipu_autotune.study.runner import Runner
from ipu_autotune.study.storage import HeartbeatJournalStorage, open_storage

pytestmark = [
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
    pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning"),
]

#: per trial: create (or pop), the first heartbeat, the sampled parameters, the tell with the
#: record
MAX_WRITES_PER_TRIAL = 4


def _url(kind: str, tmp_path: Path) -> str:
    return {
        "sqlite": f"sqlite:///{tmp_path / 's.db'}",
        "journal": f"journal:///{tmp_path / 's.journal'}",
    }[kind]


class _Writes:
    """Write transactions of one SQLAlchemy engine, or append calls of the journal backend."""

    def __init__(self, storage: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        engine = getattr(getattr(storage, "_backend", None), "engine", None)
        if engine is not None:
            dirty: set[int] = set()

            def execute(conn: Any, cursor: Any, statement: Any, *_: Any) -> None:
                if statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
                    dirty.add(id(conn))

            def commit(conn: Any) -> None:
                if id(conn) in dirty:
                    dirty.discard(id(conn))
                    self.count += 1

            sqlalchemy.event.listen(engine, "before_cursor_execute", execute)
            sqlalchemy.event.listen(engine, "commit", commit)
            sqlalchemy.event.listen(engine, "rollback", lambda conn: dirty.discard(id(conn)))
        else:
            original = JournalFileBackend.append_logs

            def append_logs(backend: Any, logs: Any) -> Any:
                self.count += 1
                return original(backend, logs)

            monkeypatch.setattr(JournalFileBackend, "append_logs", append_logs)


def _runner(url: str) -> Runner:
    profile = profile_for(PROBLEM)
    space = SearchSpace.load(PROBLEM)

    def on_create(study: Any) -> None:
        enqueue(
            study,
            space,
            PROBLEM,
            profile,
            proposals(PROBLEM, profile, space, naive_baseline(PROBLEM, profile), headroom=0.05)[
                :3
            ],
        )

    study, _ = open_study(open_storage(url), PROBLEM.slug, PROBLEM, 0, on_create)
    return Runner(study, PROBLEM, profile, space, EstimateBackend(headroom=0.05))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_trial_costs_at_most_four_storage_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    runner = _runner(_url(kind, tmp_path))
    writes = _Writes(runner.study._storage, monkeypatch)
    trials = (
        16  # the queued warm starts, the random start-up trials and TPE's own (relative params)
    )
    for _ in range(trials):
        runner.run_one()
    # Optuna alone writes each parameter apart: about 14 for this space, plus attributes and tell.
    assert writes.count <= MAX_WRITES_PER_TRIAL * trials, writes.count
    done = runner.study.get_trials(states=(TrialState.COMPLETE, TrialState.FAIL))
    assert len(done) == trials
    # Everything written, as a fresh reader (another worker) sees it.
    again = optuna.load_study(study_name=PROBLEM.slug, storage=open_storage(_url(kind, tmp_path)))
    for mine, theirs in zip(
        done, again.get_trials(states=(TrialState.COMPLETE, TrialState.FAIL)), strict=True
    ):
        assert theirs.params == mine.params and len(theirs.params) > 5
        assert theirs.user_attrs[ATTR_RECORD] == mine.user_attrs[ATTR_RECORD]
        assert theirs.system_attrs.get("constraints") == mine.system_attrs.get("constraints")
        assert theirs.values == mine.values and theirs.state == mine.state
        assert TrialRecord.from_trial(theirs) is not None
    assert {t.state for t in again.trials} <= {
        TrialState.COMPLETE,
        TrialState.FAIL,
        TrialState.WAITING,
    }


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_held_writes_are_read_back_at_once_and_reach_other_workers_at_flush_and_tell(
    tmp_path: Path, kind: str
) -> None:
    url = _url(kind, tmp_path)
    study = optuna.create_study(storage=open_storage(url), study_name="held", direction="maximize")
    other = open_storage(url)
    trial = study.ask()
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("note", "kept")
    # This process reads its own writes at once...
    assert study._storage.get_trial(trial._trial_id).params == {"x": x}
    assert study._storage.get_trial(trial._trial_id).user_attrs == {"note": "kept"}
    # ...another worker sees them once flushed: the parameters before the measurement.
    assert other.get_trial(trial._trial_id).params == {}
    held = study._storage
    assert isinstance(held, DeferredTrialWrites)  # open_storage's, for either kind
    held.flush(trial._trial_id)
    assert other.get_trial(trial._trial_id).params == {"x": x}
    trial.set_user_attr("record", {"a": 1})
    assert "record" not in other.get_trial(trial._trial_id).user_attrs
    study.tell(trial, 0.5)
    seen = other.get_trial(trial._trial_id)
    assert seen.user_attrs == {"note": "kept", "record": {"a": 1}} and seen.value == 0.5
    assert seen.state == TrialState.COMPLETE


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_read_of_the_whole_study_writes_what_is_held_first(tmp_path: Path, kind: str) -> None:
    url = _url(kind, tmp_path)
    study = optuna.create_study(
        storage=open_storage(url), study_name="reads", direction="maximize"
    )
    trial = study.ask()
    trial.suggest_categorical("c", [1, 2])
    running = study._storage.get_all_trials(study._study_id, states=(TrialState.RUNNING,))
    assert [t.params for t in running] == [trial.params]
    assert open_storage(url).get_trial(trial._trial_id).params == trial.params


def test_a_queued_trial_is_popped_by_one_worker_only(tmp_path: Path) -> None:
    url = _url("sqlite", tmp_path)
    study = optuna.create_study(storage=open_storage(url), study_name="queue")
    study.enqueue_trial({"x": 0.5})
    waiting = study.get_trials(states=(TrialState.WAITING,))[0]
    a, b = open_storage(url), open_storage(url)
    a.get_all_trials(study._study_id)
    b.get_all_trials(study._study_id)  # both saw it WAITING
    assert a.set_trial_state_values(waiting._trial_id, TrialState.RUNNING) is True
    assert b.set_trial_state_values(waiting._trial_id, TrialState.RUNNING) is False
    started = open_storage(url).get_trial(waiting._trial_id)
    assert started.state == TrialState.RUNNING and started.datetime_start is not None
    # as RDBStorage: a finished trial raises (Optuna's `_pop_waiting_trial_id` moves on), an
    # unknown one too
    a.set_trial_state_values(waiting._trial_id, TrialState.COMPLETE, [1.0])
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        b.set_trial_state_values(waiting._trial_id, TrialState.RUNNING)
    with pytest.raises(KeyError):
        b.set_trial_state_values(waiting._trial_id + 1, TrialState.RUNNING)


@pytest.mark.slow
def test_sqlite_runs_in_write_ahead_log_mode(tmp_path: Path) -> None:
    storage = open_storage(_url("sqlite", tmp_path))
    assert isinstance(storage, DeferredCachedStorage)
    with storage._backend.engine.connect() as conn:
        assert not_none(conn.exec_driver_sql("PRAGMA journal_mode").scalar()).lower() == "wal"


def test_the_journal_heartbeat_is_written_at_once_while_the_trial_writes_wait(
    tmp_path: Path,
) -> None:
    url = _url("journal", tmp_path)
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name="beat")
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    assert isinstance(storage, HeartbeatJournalStorage)
    storage.record_heartbeat(trial._trial_id)
    seen = open_storage(url).get_trial(trial._trial_id)
    assert "ipu_autotune:heartbeat" in seen.system_attrs and seen.params == {}


def test_the_record_reads_the_same_from_the_old_per_key_layout_and_the_one_attribute(
    tmp_path: Path,
) -> None:
    runner = _runner(_url("sqlite", tmp_path))
    rec = runner.run_one()
    t = runner.study.get_trials(states=(TrialState.COMPLETE, TrialState.FAIL))[-1]
    one = t.user_attrs[ATTR_RECORD]
    old = optuna.trial.create_trial(  # before the record: one user attribute per field
        params=t.params,
        distributions=t.distributions,
        value=t.value,
        system_attrs=t.system_attrs,
        user_attrs={
            "config": one["config"],
            "origin": one["origin"],
            "seconds": one["seconds"],
            "measurement": {k: v for k, v in one["measurement"].items() if k != "details"},
            "details": one["measurement"]["details"],
        },
    )
    old.number = t.number
    for trial in (t, old):
        read = not_none(TrialRecord.from_trial(trial))
        assert (read.config, read.origin, read.seconds) == (rec.config, rec.origin, one["seconds"])
        assert read.measurement.to_dict() == rec.measurement.to_dict()
        assert read.measurement.details == rec.measurement.details


def test_the_incremental_grouped_space_equals_optunas() -> None:
    """The windowed sampler adds each finished trial to its knob groups once; Optuna re-adds
    all at every ask. Same groups on a conditional space."""

    def objective(trial: Any) -> Any:
        kind = trial.suggest_categorical("kind", ["a", "b", "c"])
        trial.suggest_float("shared", 0, 1)
        if kind == "a":
            trial.suggest_float("a1", 0, 1)
            trial.suggest_int("a2", 1, 8)
        elif kind == "b":
            trial.suggest_float("b1", 0, 1)
        return 0.0

    def groups(sampler: Any) -> Any:
        study = optuna.create_study(sampler=sampler)
        study.optimize(objective, n_trials=25)
        space = sampler._group_decomposed_search_space.calculate(study, True)
        return sorted(sorted(g.items(), key=lambda kv: kv[0]) for g in space.search_spaces)

    ours = groups(
        WindowedTPESampler(seed=1, multivariate=True, group=True, n_startup_trials=5, window=8)
    )
    theirs = groups(
        optuna.samplers.TPESampler(seed=1, multivariate=True, group=True, n_startup_trials=5)
    )
    assert [[k for k, _ in g] for g in ours] == [[k for k, _ in g] for g in theirs]
    assert len(ours) >= 3


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_distributions_are_checked_at_the_suggest_when_the_parameters_are_held(
    tmp_path: Path, kind: str
) -> None:
    """As Optuna's storages (its StorageTestCase, tests/test_optuna_conformance_storage.py): a
    parameter of another kind than the study's raises at the suggest, against a finished trial's
    or a running one's still held; the trial keeps its other writes and can be told."""
    url = _url(kind, tmp_path)
    study = optuna.create_study(storage=open_storage(url), study_name="dists")
    first = study.ask()
    first.suggest_categorical("c", [1, 2])
    study.tell(first, 1.0)
    running = study.ask()
    running.suggest_categorical("r", ["a", "b"])  # held, not written yet
    second = study.ask()
    x = second.suggest_float("x", 0, 1)
    for name in ("c", "r"):
        with pytest.raises(ValueError):
            second._suggest(name, FloatDistribution(0, 1))  # the same name, another kind of knob
    study.tell(second, state=TrialState.FAIL)
    study.tell(running, 2.0)
    seen = {
        t.number: t
        for t in optuna.load_study(study_name="dists", storage=open_storage(url)).trials
    }
    assert seen[2].state == TrialState.FAIL and seen[2].params == {"x": x}
    assert CategoricalDistribution([1, 2]) == seen[0].distributions["c"]
    assert [seen[n].state for n in (0, 1)] == [TrialState.COMPLETE] * 2


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_pickled_storage_carries_no_held_writes(tmp_path: Path, kind: str) -> None:
    import pickle

    url = _url(kind, tmp_path)
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name="pickled")
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    copy = pickle.loads(pickle.dumps(storage))
    study.tell(trial, 1.0)
    seen = optuna.load_study(study_name="pickled", storage=copy).trials  # would flush a stale copy
    assert [(t.state, t.params) for t in seen] == [(TrialState.COMPLETE, trial.params)]
