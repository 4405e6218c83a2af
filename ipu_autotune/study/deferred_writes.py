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

A batch is one SQL transaction (`DeferredCachedStorage`, deferred_rdb.py) or one
`append_logs` call of the journal backend (`DeferredJournalWrites` here, the same log records
`JournalStorage` writes one at a time, optuna/storages/journal/_storage.py). Both hold a
trial's writes through `DeferredTrialWrites`, the mixin here.

Both meet Optuna's storage contract: its own suite (StorageTestCase) runs against them in
tests/test_optuna_conformance_storage.py.
"""

from __future__ import annotations

import copy
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
from optuna.trial import FrozenTrial, TrialState

from ..optuna_private import journal_operations

# The mixins are type-checked as BaseStorage, whose methods are abstract; at run time their
# super() is the concrete storage they are mixed into (hence each `ignore[safe-super]`).
if TYPE_CHECKING:
    from optuna.storages import BaseStorage as _StorageBase, JournalStorage as _JournalBase
else:
    _StorageBase = _JournalBase = object


@dataclass
class Held:
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
            held: Held,
            state: TrialState | None,
            values: Sequence[float] | None,
        ) -> bool: ...

        def _study_of(self, trial_id: int) -> int | None: ...

        def _known_distribution(self, study_id: int, name: str) -> BaseDistribution | None: ...

    def _held_init(self) -> None:
        self._held: dict[int, Held] = {}
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
            self._held.setdefault(trial_id, Held())

    def flush(self, trial_id: int | None = None) -> None:
        """Write the held writes of one trial (None: of every trial) in one batch each."""
        with self._held_lock:
            ids = list(self._held) if trial_id is None else [trial_id]
            for tid in ids:
                held = self._held.get(tid)
                if held:
                    self._held[tid] = Held()
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
        super().set_trial_param(  # type: ignore[safe-super]
            trial_id, param_name, param_value_internal, distribution
        )

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
        super().set_trial_user_attr(trial_id, key, value)  # type: ignore[safe-super]

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._held_lock:
            if trial_id in self._held:
                self._held[trial_id].system_attrs[key] = value
                return
        super().set_trial_system_attr(trial_id, key, value)  # type: ignore[safe-super]

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = super().create_new_trial(study_id, template_trial)  # type: ignore[safe-super]
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
            changed = super().set_trial_state_values(  # type: ignore[safe-super]
                trial_id, state, values
            )
            if state == TrialState.RUNNING and (changed or held is not None):
                self._hold(trial_id)  # popped from the queue: this process runs it
            return changed

    # --- reads ------------------------------------------------------------------------------

    def get_trial(self, trial_id: int) -> FrozenTrial:
        with self._held_lock:
            held = self._held.get(trial_id)
            trial = super().get_trial(trial_id)  # type: ignore[safe-super]
            return held.merged(trial) if held else trial

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        self.flush()
        return super().get_all_trials(  # type: ignore[safe-super]
            study_id, deepcopy=deepcopy, states=states
        )


def first_distribution(trials: Iterable[FrozenTrial], name: str) -> BaseDistribution | None:
    """The distribution of `name` in the first of `trials` that has it (any will do: every
    distribution a storage recorded for a name is compatible with every other)."""
    return next((t.distributions[name] for t in trials if name in t.distributions), None)


def flush(storage: object, trial_id: int) -> None:
    """Write a running trial's held writes now (a no-op on storages that hold none)."""
    if isinstance(storage, DeferredTrialWrites):
        storage.flush(trial_id)


class DeferredJournalWrites(DeferredTrialWrites, _JournalBase):
    """For a JournalStorage subclass: a held trial's writes in one `append_logs` call."""

    def _study_of(self, trial_id: int) -> int | None:
        with self._thread_lock:
            return self._replay_result._trial_id_to_study_id.get(trial_id)

    def _known_distribution(self, study_id: int, name: str) -> BaseDistribution | None:
        with self._thread_lock:  # the log as this process last read it
            return first_distribution(
                self._replay_result.get_all_trials(study_id, states=None), name
            )

    def _write_batch(
        self, trial_id: int, held: Held, state: TrialState | None, values: Sequence[float] | None
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
