"""The batching storage on an RDBStorage (SQLite, PostgreSQL, MySQL): Optuna's cache with a
held trial's writes in one SQL transaction (deferred_writes.py says what is held and when it is
written), calling the `_without_commit` helpers RDBStorage itself uses to create a trial from a
template (optuna/storages/_rdb/storage.py `_get_prepared_new_trial`). It also keeps what this
process knows of the trials it runs, so Optuna's re-reads of them are answered without a query.
"""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Container, Sequence
from datetime import datetime
from typing import Any, cast

from optuna.distributions import (
    BaseDistribution,
    check_distribution_compatibility,
    distribution_to_json,
)
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from ..optuna_private import CachedStorage, rdb_models, rdb_session
from .deferred_writes import DeferredTrialWrites, Held, first_distribution


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
                found = first_distribution(study.trials.values(), name)
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
                else:  # as RDBStorage: KeyError for no such trial, UpdateFinishedTrialError for
                    # a finished one (Optuna's `_pop_waiting_trial_id` moves on), False for a
                    # running one
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
        self, trial_id: int, held: Held, state: TrialState | None, values: Sequence[float] | None
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
                _set_attrs(session, rdb, models.TrialUserAttributeModel, trial_id, held.user_attrs)
                _set_attrs(
                    session, rdb, models.TrialSystemAttributeModel, trial_id, held.system_attrs
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


def _set_attrs(
    session: Any, rdb: RDBStorage, model: Any, trial_id: int, attrs: dict[str, Any]
) -> None:
    """Write a held trial's attributes of one kind as RDBStorage's
    `_set_trial_attr_without_commit` writes each (an upsert on SQLite and PostgreSQL), but in
    one statement and without looking the trial up again for each (the batch has checked it
    can be updated). Other databases take RDBStorage's own path, one attribute at a time."""
    if not attrs:
        return
    dialect = rdb.engine.name
    if dialect == "sqlite" and sqlite3.sqlite_version_info >= (3, 24, 0):
        from sqlalchemy.dialects.sqlite import insert as upsert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as upsert  # type: ignore[assignment]
    else:
        for key, value in attrs.items():
            rdb._set_trial_attr_without_commit(session, model, trial_id, key, value)
        return
    rows = [
        {"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()
    ]
    statement = upsert(model).values(rows)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[model.trial_id, model.key],
            set_={"value_json": statement.excluded.value_json},
        )
    )


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
