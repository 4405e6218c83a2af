"""A running trial's storage writes, held and written together: few writes per trial.

Optuna writes each parameter (`Trial._suggest`), each trial attribute and the final state as
its own storage operation: on SQLite each is a transaction with its own fsync, on a journal
file each an append under the file lock with its own fsync. A trial of the default run made
about 19 of them. Here the writes of a trial this process is running (created by `ask` or
popped from the queue) are held in memory and written as one batch:

- when the runner calls `flush(trial_id)`, right after the configuration is chosen (so other
  workers see the running trial's parameters for the constant liar, and a stale-trial retry
  copies them, during the long measurement);
- together with the trial's final state (`study.tell`): the record, the constraint, the
  value and the state in one write;
- before any read of the whole study (`get_all_trials`), so this process never reads
  behind its own writes; a read of the trial itself (`get_trial`) sees them merged in.

That is Optuna's own promise for its cached storage (optuna/storages/_cached_storage.py,
`_CachedStorage` docstring, "Data persistence": a trial's earlier writes are persisted
before its state changes). What a process killed mid-trial loses is at most the writes of
the few milliseconds between its ask and its flush; its trial is failed by the heartbeat.

A batch is one SQL transaction (`DeferredCachedStorage`, calling the `_without_commit`
helpers RDBStorage itself uses to create a trial from a template,
optuna/storages/_rdb/storage.py `_get_prepared_new_trial`) or one `append_logs` call of
the journal backend (`DeferredJournalWrites`, the same log records `JournalStorage` writes
one at a time, optuna/storages/journal/_storage.py).

Both meet Optuna's storage contract: its own suite (StorageTestCase) runs against them in
tests/test_optuna_conformance_storage.py.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from optuna.distributions import (
    BaseDistribution,
    check_distribution_compatibility,
    distribution_to_json,
)
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from ..optuna_private import CachedStorage, journal_operations, rdb_models, rdb_session

if TYPE_CHECKING:  # the mixins are type-checked as the storages they are mixed into
    from optuna.storages import BaseStorage as _StorageBase, JournalStorage as _JournalBase
else:
    _StorageBase = _JournalBase = object


@dataclass
class _Held:
    """One trial's writes not yet in the storage."""

    params: dict[str, tuple[float, BaseDistribution]] = field(default_factory=dict)
    user_attrs: dict[str, Any] = field(default_factory=dict)
    system_attrs: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.params or self.user_attrs or self.system_attrs)

    def merged(self, trial: FrozenTrial) -> FrozenTrial:
        """`trial` as it will be once these writes are in (a copy: callers may change it)."""
        t = copy.copy(trial)
        t.params = {**t.params, **{k: d.to_external_repr(v) for k, (v, d) in self.params.items()}}
        t.distributions = {**t.distributions, **{k: d for k, (_, d) in self.params.items()}}
        t.user_attrs = {**t.user_attrs, **self.user_attrs}
        t.system_attrs = {**t.system_attrs, **self.system_attrs}
        return t


class DeferredTrialWrites(_StorageBase):
    """Mixin for a storage class: holds the writes of the trials this process runs (module
    docstring). The storage implements `_write_batch(trial_id, held, state, values)`, and
    `_study_of(trial_id)` and `_known_distribution(study_id, name)` from what it has read."""

    if TYPE_CHECKING:  # what the storage class provides

        def _write_batch(
            self,
            trial_id: int,
            held: _Held,
            state: TrialState | None,
            values: Sequence[float] | None,
        ) -> bool: ...

        def _study_of(self, trial_id: int) -> int | None: ...

        def _known_distribution(self, study_id: int, name: str) -> BaseDistribution | None: ...

    def _held_init(self) -> None:
        self._held: dict[int, _Held] = {}
        self._held_lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (as Optuna's storages are) without the lock, and without this process's
        held writes and running trials: a copy elsewhere does not run them."""
        state = cast(dict[str, Any], super().__getstate__())  # the storage's own (RDBStorage's...)
        state.pop("_held_lock", None)
        state.update(
            {k: type(state[k])() for k in ("_held", "_own", "_just_read", "_told") if k in state}
        )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[misc]  # the storage's own, as __getstate__
        self._held_lock = threading.RLock()

    def _hold(self, trial_id: int) -> None:
        with self._held_lock:
            self._held.setdefault(trial_id, _Held())

    def flush(self, trial_id: int | None = None) -> None:
        """Write the held writes of one trial (None: of every trial) in one batch each."""
        with self._held_lock:
            ids = list(self._held) if trial_id is None else [trial_id]
            for tid in ids:
                held = self._held.get(tid)
                if held:
                    self._held[tid] = _Held()
                    self._write_batch(tid, held, None, None)

    # --- writes -----------------------------------------------------------------------------

    def set_trial_param(
        self,
        trial_id: int,
        param_name: str,
        param_value_internal: float,
        distribution: BaseDistribution,
    ) -> None:
        with self._held_lock:
            if trial_id in self._held:
                self._check_compatible(trial_id, param_name, distribution)
                self._held[trial_id].params[param_name] = (param_value_internal, distribution)
                return
        super().set_trial_param(trial_id, param_name, param_value_internal, distribution)

    def _check_compatible(self, trial_id: int, name: str, distribution: BaseDistribution) -> None:
        """ValueError now, as Optuna's storages raise it at `suggest`, for a distribution of a
        kind (or categorical choices) other than the study's for the same name: held, it would
        fail the whole batch at the flush or the tell, and leave the trial RUNNING. The study's
        distribution is the one this process knows: a held trial's, or the storage's (what it
        last read); one only another worker has written is still checked when the batch is."""
        study_id = self._study_of(trial_id)
        if study_id is None:  # not a trial of a study this process knows: the write says so
            return
        known = next(
            (
                h.params[name][1]
                for tid, h in self._held.items()
                if name in h.params and self._study_of(tid) == study_id
            ),
            None,
        )
        if known is None:
            known = self._known_distribution(study_id, name)
        if known is not None:
            check_distribution_compatibility(known, distribution)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._held_lock:
            if trial_id in self._held:
                self._held[trial_id].user_attrs[key] = value
                return
        super().set_trial_user_attr(trial_id, key, value)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._held_lock:
            if trial_id in self._held:
                self._held[trial_id].system_attrs[key] = value
                return
        super().set_trial_system_attr(trial_id, key, value)

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = super().create_new_trial(study_id, template_trial)
        if template_trial is None:  # a trial `ask` runs here (a template is enqueued or added)
            self._hold(trial_id)
        return trial_id

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        with self._held_lock:
            held = self._held.pop(trial_id, None)
            if held and state.is_finished():
                return self._write_batch(trial_id, held, state, values)  # the trial's last write
            if held:
                self._write_batch(trial_id, held, None, None)
            changed = super().set_trial_state_values(trial_id, state, values)
            if state == TrialState.RUNNING and (changed or held is not None):
                self._hold(trial_id)  # popped from the queue: this process runs it
            return changed

    # --- reads ------------------------------------------------------------------------------

    def get_trial(self, trial_id: int) -> FrozenTrial:
        with self._held_lock:
            held = self._held.get(trial_id)
            trial = super().get_trial(trial_id)
            return held.merged(trial) if held else trial

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        self.flush()
        return super().get_all_trials(study_id, deepcopy=deepcopy, states=states)


def _finished(
    trial_id: int,
    running: FrozenTrial,
    state: TrialState,
    values: Sequence[float] | None,
    completed: datetime,
) -> FrozenTrial:
    """The trial as the database holds it after its last batch (`running`: with that batch's
    writes): its attributes as JSON reads them back, its state, values and end time. The end
    time is the one written, as RDBStorage's own `_create_new_trial` returns the start time
    it wrote (a MySQL DATETIME keeps whole seconds of either)."""
    return FrozenTrial(
        number=running.number,
        state=state,
        value=None,
        values=None if values is None else [float(v) for v in values],
        datetime_start=running.datetime_start,
        datetime_complete=completed,
        params=dict(running.params),
        distributions=dict(running.distributions),
        user_attrs=json.loads(json.dumps(running.user_attrs)),
        system_attrs=json.loads(json.dumps(running.system_attrs)),
        intermediate_values=dict(running.intermediate_values),
        trial_id=trial_id,
    )


def _first_distribution(trials: Iterable[FrozenTrial], name: str) -> BaseDistribution | None:
    """The distribution of `name` in the first of `trials` that has it (any will do: every
    distribution a storage recorded for a name is compatible with every other)."""
    return next((t.distributions[name] for t in trials if name in t.distributions), None)


def flush(storage: object, trial_id: int) -> None:
    """Write a running trial's held writes now (a no-op on storages that hold none)."""
    if isinstance(storage, DeferredTrialWrites):
        storage.flush(trial_id)


class DeferredCachedStorage(DeferredTrialWrites, CachedStorage):
    """Optuna's cached RDB storage, a held trial's writes in one transaction. Popping a queued
    trial is one conditional UPDATE, so two workers cannot both pop it: RDBStorage reads the
    state and then writes it (`set_trial_state_values`), and SQLite ignores its
    `with_for_update`, so two workers could both see WAITING and both run the trial."""

    def __init__(self, backend: RDBStorage) -> None:
        super().__init__(backend)
        self._held_init()
        #: the trials this process runs, as it last read or wrote them: Optuna reads a running
        #: trial from the database at every `get_trial` (three a trial), though only this
        #: process writes to it (another may only fail it as stale: its tell then fails)
        self._own: dict[int, FrozenTrial] = {}
        #: studies in which `ask` just created a trial: its `_pop_waiting_trial_id` read the
        #: study a moment before, so the sampler's read that follows need not read it again
        self._just_read: set[int] = set()
        #: the trials this process just finished, as its last batch wrote them: `study.tell`
        #: reads the trial back at once (what it returns), and the cache would read it from
        #: the database (six queries) until its next read of the study brings it in finished
        self._told: dict[int, FrozenTrial] = {}

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = super().create_new_trial(study_id, template_trial)
        if template_trial is None:
            with self._lock:
                _, number = self._trial_id_to_study_id_and_number[trial_id]
                self._own[trial_id] = self._studies[study_id].trials[number]
                self._just_read.add(study_id)
        return trial_id

    def _study_of(self, trial_id: int) -> int | None:
        study_and_number = self._trial_id_to_study_id_and_number.get(trial_id)
        return study_and_number[0] if study_and_number else None

    def _known_distribution(self, study_id: int, name: str) -> BaseDistribution | None:
        with self._lock:
            study = self._studies.get(study_id)
            if study is None:
                return None
            if name not in study.param_distribution:  # as read: it is in the database
                found = _first_distribution(study.trials.values(), name)
                if found is not None:
                    study.param_distribution[name] = found
            return study.param_distribution.get(name)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        with self._held_lock:
            told = self._told.get(trial_id)
            if told is not None:
                return told
            held = self._held.get(trial_id)
            if held is None:
                return CachedStorage.get_trial(self, trial_id)
            if trial_id not in self._own:
                self._own[trial_id] = CachedStorage.get_trial(self, trial_id)
            return held.merged(self._own[trial_id])

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        self.flush()
        with self._lock:
            if study_id not in self._just_read or study_id not in self._studies:
                fresh = False
            else:
                self._just_read.discard(study_id)
                trials = sorted(
                    (
                        t
                        for t in self._studies[study_id].trials.values()
                        if states is None or t.state in states
                    ),
                    key=lambda t: t.number,
                )
                fresh = True
        if not fresh:
            trials = CachedStorage.get_all_trials(self, study_id, deepcopy=deepcopy, states=states)
            with self._held_lock:  # the read brought this study's finished trials into the cache
                for tid in [tid for tid in self._told if self._study_of(tid) == study_id]:
                    del self._told[tid]
            return trials
        return copy.deepcopy(trials) if deepcopy else trials

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        if state != TrialState.RUNNING:
            try:
                return super().set_trial_state_values(trial_id, state, values)
            finally:
                with self._held_lock:
                    self._own.pop(trial_id, None)
        with self._held_lock:
            self._own.pop(trial_id, None)
        models = rdb_models()

        with self._held_lock:
            self.flush(trial_id)
            with rdb_session(self._backend) as session:
                updated = (
                    session.query(models.TrialModel)
                    .filter(
                        models.TrialModel.trial_id == trial_id,
                        models.TrialModel.state == TrialState.WAITING,
                    )
                    .update(
                        {models.TrialModel.state: TrialState.RUNNING}, synchronize_session=False
                    )
                )
                if (
                    updated == 1
                ):  # the start time as RDBStorage writes it (its model converts to UTC)
                    models.TrialModel.find_or_raise_by_id(
                        trial_id, session
                    ).datetime_start = datetime.now()
                else:  # as RDBStorage: KeyError for no such trial, UpdateFinishedTrialError for a
                    # finished one (Optuna's `_pop_waiting_trial_id` moves on), False for a running one
                    found = models.TrialModel.find_or_raise_by_id(trial_id, session)
                    self._backend.check_trial_is_updatable(trial_id, cast(TrialState, found.state))
            if updated == 1:
                self._hold(trial_id)
            return bool(updated == 1)

    def set_trial_intermediate_value(
        self, trial_id: int, step: int, intermediate_value: float
    ) -> None:
        """Written at once (not held); a running trial's own copy sees it too."""
        super().set_trial_intermediate_value(trial_id, step, intermediate_value)
        with self._held_lock:
            own = self._own.get(trial_id)
            if own is not None:
                own = copy.copy(own)
                own.intermediate_values = {**own.intermediate_values, step: intermediate_value}
                self._own[trial_id] = own

    def _write_batch(
        self, trial_id: int, held: _Held, state: TrialState | None, values: Sequence[float] | None
    ) -> bool:
        from sqlalchemy import insert

        models = rdb_models()
        rdb: RDBStorage = self._backend
        with self._lock:
            study_id, _ = self._trial_id_to_study_id_and_number[trial_id]
            known = self._studies[study_id].param_distribution
            with rdb_session(rdb) as session:
                trial = models.TrialModel.find_or_raise_by_id(
                    trial_id, session, for_update=state is not None
                )
                rdb.check_trial_is_updatable(
                    trial_id, cast(TrialState, trial.state)
                )  # the column's value
                rows: list[dict[str, Any]] = []
                for name, (value, dist) in held.params.items():
                    if (
                        name not in known
                    ):  # the first time this process sees it: Optuna looks it up
                        rdb._set_trial_param_without_commit(session, trial_id, name, value, dist)
                        continue
                    # as `_set_trial_param_without_commit` does, without looking the trial up again
                    check_distribution_compatibility(known[name], dist)
                    rows.append(
                        {
                            "trial_id": trial_id,
                            "param_name": name,
                            "param_value": value,
                            "distribution_json": distribution_to_json(dist),
                        }
                    )
                if rows:  # one INSERT for them all (added one by one, the ORM sends one each)
                    session.execute(insert(models.TrialParamModel), rows)
                for key, value in held.user_attrs.items():
                    rdb._set_trial_attr_without_commit(
                        session, models.TrialUserAttributeModel, trial_id, key, value
                    )
                for key, value in held.system_attrs.items():
                    rdb._set_trial_attr_without_commit(
                        session, models.TrialSystemAttributeModel, trial_id, key, value
                    )
                completed = datetime.now()
                if state is not None:  # as RDBStorage.set_trial_state_values does when finished
                    for objective, v in enumerate(values or ()):
                        rdb._set_trial_value_without_commit(session, trial, objective, v)
                    trial.state = state
                    trial.datetime_complete = completed
            for name, (_, dist) in held.params.items():
                known.setdefault(name, dist)
        own = self._own.get(trial_id)
        if own is not None and state is None:
            self._own[trial_id] = held.merged(own)
        elif own is not None and state is not None:
            self._told[trial_id] = _finished(trial_id, held.merged(own), state, values, completed)
        return True


class DeferredJournalWrites(DeferredTrialWrites, _JournalBase):
    """For a JournalStorage subclass: a held trial's writes in one `append_logs` call."""

    def _study_of(self, trial_id: int) -> int | None:
        with self._thread_lock:
            return self._replay_result._trial_id_to_study_id.get(trial_id)

    def _known_distribution(self, study_id: int, name: str) -> BaseDistribution | None:
        with self._thread_lock:  # the log as this process last read it
            return _first_distribution(
                self._replay_result.get_all_trials(study_id, states=None), name
            )

    def _write_batch(
        self, trial_id: int, held: _Held, state: TrialState | None, values: Sequence[float] | None
    ) -> bool:
        Op = journal_operations()  # the op codes, named as Optuna imports them

        logs: list[dict[str, Any]] = []
        for name, (value, dist) in held.params.items():
            logs.append(
                {
                    "op_code": Op.SET_TRIAL_PARAM,
                    "trial_id": trial_id,
                    "param_name": name,
                    "param_value_internal": value,
                    "distribution": distribution_to_json(dist),
                }
            )
        # one attribute per record: the journal's replay asserts it
        logs += [
            {"op_code": Op.SET_TRIAL_USER_ATTR, "trial_id": trial_id, "user_attr": {k: v}}
            for k, v in held.user_attrs.items()
        ]
        logs += [
            {"op_code": Op.SET_TRIAL_SYSTEM_ATTR, "trial_id": trial_id, "system_attr": {k: v}}
            for k, v in held.system_attrs.items()
        ]
        if state is not None:
            logs.append(
                {
                    "op_code": Op.SET_TRIAL_STATE_VALUES,
                    "trial_id": trial_id,
                    "state": state,
                    "values": None if values is None else list(values),
                    "datetime_complete": datetime.now(tz=UTC).isoformat(timespec="microseconds"),
                }
            )
        with self._thread_lock:
            worker = self._replay_result.worker_id
            self._backend.append_logs([{**log, "worker_id": worker} for log in logs])
            self._sync_with_backend()
        return True
