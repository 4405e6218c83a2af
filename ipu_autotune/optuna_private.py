"""Every private Optuna name the project uses, imported or reached from here (issue 61).

Optuna's storages and its TPE sampler are extended in three places: a storage that writes a
running trial's writes in one batch (study/deferred_writes.py), a journal storage with a
heartbeat (study/storage.py) and a TPE that models a window of the study (search/window.py).
No module but this one imports from Optuna's private modules or reads a private attribute of
an Optuna object it did not make (a Study, a Trial); the subclasses above still read the state
they inherit, named below. `pyproject.toml` pins Optuna to one minor release: before widening
it, run the suites named there against these.

Count (distinct private names, in study/storage.py, study/deferred_writes.py + deferred_rdb.py,
search/window.py and study/runner.py): 26 before, 21 after, 22 since the window makes TPE's
split once per ask (issue 61's per-trial time). Replaced by public API or our own code (5):
`TPESampler._sample` (the window overrides the public `sample_relative` and
`sample_independent` instead); `_GroupDecomposedSearchSpace`, `_SearchSpaceGroup` and their
`_include_pruned`, `_search_space` (search/window.py's `KnobGroups`, the same decomposition);
a stale journal trial's id is asked of the storage's public
`get_trial_id_from_study_id_trial_number`, not read from `FrozenTrial._trial_id`.

What remains, and why (no public API does it):

Imported here, lazily where they pull in SQLAlchemy:
1. `storages._heartbeat.BaseHeartbeat`: Optuna fails stale trials only on storages that are
   one (`fail_stale_trials`); the journal storage with a heartbeat must be one.
2. `storages._cached_storage._CachedStorage`: the cache Optuna wraps every RDBStorage in;
   the batching storage is that cache, so Optuna does not wrap it a second time.
3. `storages._rdb.models`: the batch's rows, and the conditional UPDATE that pops a queued
   trial (two workers cannot both pop it; SQLite ignores RDBStorage's `with_for_update`).
4. `storages._rdb.storage._create_scoped_session`: RDBStorage's transaction, so a batch
   commits or rolls back as one.
5. `storages.journal._storage.JournalOperation`: the op codes of the records a batch appends.

Read here, of objects Optuna made:
6. `Study._storage`: the storage of a study (the runner flushes and beats through it).
7. `Trial._trial_id`: a running trial's id in that storage.
8. `Study._get_trials(use_cache=True)`: the study's trials as read at the start of this ask
   (the public `get_trials` reads the storage again, at every call of TPE's).
9. `TPESampler._group_decomposed_search_space`: where TPE keeps the grouped search space
   that the window replaces by an incremental one.

Read by our subclasses, of the state they inherit:
10. `_CachedStorage._backend` / `JournalStorage._backend` (also `cached_backend` here: the
    RDBStorage behind the cache, whose heartbeat the runner sets).
11-13. `_CachedStorage._lock`, `._studies`, `._trial_id_to_study_id_and_number`: the cache's
    lock and what it has read, which a batch updates as RDBStorage's own writes would.
14-16. `RDBStorage._set_trial_param_without_commit`, `._set_trial_attr_without_commit`,
    `._set_trial_value_without_commit`: RDBStorage's writes inside a caller's transaction
    (what it uses itself to create a trial from a template).
17-20. `JournalStorage._thread_lock`, `._replay_result` (and its `_trial_id_to_study_id`),
    `._sync_with_backend`: the journal's lock, its replayed state and its re-read after an
    append, as its own writes use them.
21. `BaseHeartbeat._get_stale_trial_ids`: the abstract method a heartbeat storage implements.

Routed through here:
22. `samplers._tpe.sampler._split_trials`: TPE's split of the trials into good and bad, made
    once per group of knobs (about 7 a trial here) from the same trials; the window makes it
    once per ask (`split_trials_through_study`).
"""

from __future__ import annotations

from collections.abc import Container
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any

from optuna.storages._cached_storage import _CachedStorage as CachedStorage
from optuna.storages._heartbeat import BaseHeartbeat as BaseHeartbeat

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage, RDBStorage
    from optuna.trial import FrozenTrial, Trial, TrialState
    from sqlalchemy.orm import Session

__all__ = [
    "BaseHeartbeat",
    "CachedStorage",
    "cached_backend",
    "journal_operations",
    "rdb_models",
    "rdb_session",
    "replace_group_decomposition",
    "split_trials_through_study",
    "study_storage",
    "study_trials",
    "trial_id",
]


def study_storage(study: optuna.Study) -> BaseStorage:
    """The storage `study` reads and writes (Optuna wraps an RDBStorage in its cache)."""
    storage: BaseStorage = study._storage
    return storage


def trial_id(trial: Trial) -> int:
    """A running trial's id in its study's storage."""
    return trial._trial_id


def study_trials(
    study: Any, states: Container[TrialState] | None, use_cache: bool
) -> list[FrozenTrial]:
    """`study`'s trials, not copied; `use_cache`: as read at the start of this ask. `study` is an
    optuna.Study or what stands in for one to TPE (search/window.py)."""
    trials: list[FrozenTrial] = study._get_trials(
        deepcopy=False, states=states, use_cache=use_cache
    )
    return trials


def cached_backend(storage: BaseStorage) -> BaseStorage:
    """The storage behind Optuna's cache (what `open_storage` built), else `storage` itself."""
    if isinstance(storage, CachedStorage):
        backend: BaseStorage = storage._backend
        return backend
    return storage


def rdb_models() -> ModuleType:
    """RDBStorage's SQLAlchemy models (imported on use: SQLAlchemy is slow to import)."""
    from optuna.storages._rdb import models

    return models


def rdb_session(rdb: RDBStorage) -> AbstractContextManager[Session]:
    """One transaction of `rdb`'s: committed on leaving, rolled back on an error."""
    from optuna.storages._rdb.storage import _create_scoped_session

    return _create_scoped_session(rdb.scoped_session)


def journal_operations() -> Any:
    """The op codes of the journal's records (`JournalOperation`)."""
    from optuna.storages.journal._storage import JournalOperation

    return JournalOperation


def split_trials_through_study() -> None:
    """Let the study TPE samples from make its split of the trials into good and bad: a study
    with a `split_trials(trials, n_below, split)` method (search/window.py's window) answers,
    given Optuna's own `split`; any other study gets Optuna's split as before. TPE calls the
    module's `_split_trials(study, trials, n_below)` once per group of knobs. Installed once."""
    from optuna.samplers._tpe import sampler as tpe

    optunas = tpe._split_trials
    if getattr(optunas, "through_study", False):
        return

    def split(study: Any, trials: list[FrozenTrial], n_below: int) -> Any:
        own = getattr(type(study), "split_trials", None)
        return own(study, trials, n_below, optunas) if own else optunas(study, trials, n_below)

    split.through_study = True  # type: ignore[attr-defined]  # the mark of the installed one
    tpe._split_trials = split


def replace_group_decomposition(sampler: optuna.samplers.TPESampler, groups: object) -> bool:
    """Put `groups` where TPE keeps its grouped search space; False when `sampler` keeps none
    (it was built without `group=True`)."""
    if getattr(sampler, "_group_decomposed_search_space", None) is None:
        return False
    # duck-typed: TPE only calls its calculate()
    sampler._group_decomposed_search_space = groups  # type: ignore[assignment]
    return True
