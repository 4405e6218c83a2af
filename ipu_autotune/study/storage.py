"""Optuna storage from a URL: SQLite (one host), a journal file (shared file system) or
PostgreSQL/MySQL (many hosts). Passwords never reach output: use `mask_url`. What a URL names,
checked without opening it, is storage_url.py.

Crashed workers (docs/multi-host.md): every storage here but the in-memory ones (one process's
own, `in_memory`) has a heartbeat. A worker beats for the trial it runs every `interval`
seconds; a trial whose worker has not beaten for `GRACE_FACTOR` intervals is failed by the
next worker that checks, and re-enqueued once more (up to `MAX_RETRY` times) with the same
parameters, so no configuration is lost.
The interval is a property of the study (set when it is created, `--heartbeat`), so every
worker judges staleness the same way.
"""

from __future__ import annotations

import copy
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import optuna
from optuna.storages import BaseStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import BaseJournalBackend
from optuna.trial import FrozenTrial, TrialState

from ..errors import UsageError
from ..optuna_private import BaseHeartbeat, cached_backend
from .deferred_rdb import DeferredCachedStorage
from .deferred_writes import DeferredJournalWrites

# What a URL names is storage_url.py's; these names are re-exported here for the modules
# that import them with open_storage.
from .storage_url import (
    check_url,
    file_missing,
    first_line,
    in_memory,
    is_journal,
    journal_path,
    mask_url,
    missing_driver,
    normalise_url,
)

__all__ = [
    "CONNECT_TIMEOUT_S",
    "HEARTBEAT_INTERVAL_S",
    "SQLITE_LOCK_TIMEOUT_S",
    "Heartbeat",
    "check_url",
    "file_missing",
    "heartbeat_interval",
    "in_memory",
    "is_journal",
    "journal_path",
    "mask_url",
    "missing_driver",
    "open_storage",
    "retry_trial",
    "set_heartbeat",
]

#: a worker beats this often for the trial it runs (seconds)
HEARTBEAT_INTERVAL_S = 10
#: a trial whose worker missed this many beats is presumed dead: failed and retried
GRACE_FACTOR = 3
#: how many times one configuration is retried after its worker died (or was interrupted)
MAX_RETRY = 2
#: seconds to wait for a database server before calling it unreachable
CONNECT_TIMEOUT_S = 10
#: seconds an SQLite writer waits for another worker's lock before failing
SQLITE_LOCK_TIMEOUT_S = 60

#: trial system attribute the journal heartbeat writes (epoch seconds, UTC)
_JOURNAL_BEAT = "ipu_autotune:heartbeat"


def _engine_kwargs(scheme: str) -> dict[str, Any]:
    if scheme == "sqlite":
        return {"connect_args": {"timeout": SQLITE_LOCK_TIMEOUT_S}}
    if scheme in ("postgresql", "postgres", "cockroachdb"):
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    if scheme in ("mysql", "mariadb"):
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    return {"pool_pre_ping": True}


def open_storage(url: str, heartbeat_s: int = HEARTBEAT_INTERVAL_S) -> optuna.storages.BaseStorage:
    """Open (creating if needed) the storage behind `url`, or raise a one-line UsageError."""
    check_url(url)
    if url == "memory:":
        return optuna.storages.InMemoryStorage()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend

        try:
            return HeartbeatJournalStorage(
                JournalFileBackend(str(journal_path(url))), heartbeat_s, retry
            )
        except OSError as exc:
            raise UsageError(f"storage {mask_url(url)}: {exc.strerror or exc}") from None
    url = normalise_url(url)
    scheme = url.split(":", 1)[0].lower().split("+")[0]
    # sqlite:///:memory: is this process's alone, as memory: is: no other worker to beat for
    # (nor could one: each thread's connection has a database of its own)
    beats = not in_memory(url)
    try:
        for attempt in range(5):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    rdb = optuna.storages.RDBStorage(
                        url,
                        heartbeat_interval=heartbeat_s if beats else None,
                        grace_period=heartbeat_s * GRACE_FACTOR if beats else None,
                        heartbeat_stale_trial_callback=retry if beats else None,
                        engine_kwargs=_engine_kwargs(scheme),
                    )
                # no log to write ahead in memory, and `_write_ahead_log` disposing of the
                # engine's connection would drop the in-memory database with its tables
                if scheme == "sqlite" and beats:
                    _write_ahead_log(rdb)
                # a running trial's writes in one transaction (deferred_writes.py); Optuna
                # would wrap it in its _CachedStorage, this is that with the writes held
                return DeferredCachedStorage(rdb)
            except Exception as exc:
                # Workers starting together on a new database race to create its tables:
                # the losers see "already exists" / a duplicate key; the tables are there now.
                if attempt == 4 or not _creation_race(exc):
                    raise
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("not reached: the last attempt returns or raises")
    except ImportError as exc:
        raise UsageError(f"storage {mask_url(url)}: {missing_driver(url, exc)}") from None
    except Exception as exc:  # sqlalchemy raises many types; all mean "cannot use this URL"
        reason = mask_url(first_line(exc))
        raise UsageError(
            f"storage {mask_url(url)} is unreachable: {reason}; check the host, port, "
            "user and that the database exists"
        ) from None


def _write_ahead_log(rdb: RDBStorage) -> None:
    """SQLite in write-ahead-log mode with synchronous=NORMAL: a commit appends to the log
    without an fsync (the log is synced at checkpoints), where the rollback journal paid
    several fsyncs a commit (15-18 ms each on this machine's disk against 0.01 ms; a trial
    makes 4 writes). The database stays consistent; a power cut or OS crash (not a killed
    worker) may lose the last trials, which a resumed study runs again. WAL needs the workers
    on one host (shared memory), which is what SQLite is for here (docs/multi-host.md).
    Two workers cannot pop the same queued trial: popping is the conditional UPDATE in
    deferred_writes.py (tests/test_workers.py)."""
    from sqlalchemy import event

    def on_connect(connection: Any, _record: object) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(rdb.engine, "connect", on_connect)
    rdb.engine.dispose()  # the connections that created the tables get it too


def _creation_race(exc: BaseException) -> bool:
    try:
        from sqlalchemy.exc import IntegrityError, ProgrammingError
    except ImportError:  # pragma: no cover - sqlalchemy comes with optuna
        return False
    text = str(exc).lower()
    return isinstance(exc, (IntegrityError, ProgrammingError)) or "already exists" in text


# --- heartbeat -------------------------------------------------------------------------------


def heartbeat_interval(storage: BaseStorage) -> int | None:
    inner = cached_backend(storage)
    return inner.get_heartbeat_interval() if isinstance(inner, BaseHeartbeat) else None


def set_heartbeat(storage: BaseStorage, interval_s: int) -> None:
    """Beat every `interval_s` seconds and presume a worker dead after GRACE_FACTOR of them
    (a storage opened without a heartbeat, sqlite:///:memory:, keeps none)."""
    inner = cached_backend(storage)
    if isinstance(inner, BaseHeartbeat) and getattr(inner, "heartbeat_interval", None) is not None:
        beating: Any = inner  # RDBStorage and HeartbeatJournalStorage keep both as attributes
        beating.heartbeat_interval = int(interval_s)
        beating.grace_period = int(interval_s) * GRACE_FACTOR


class Heartbeat:
    """One background thread per worker, beating for whichever trial the worker runs.

    `track(trial_id)` beats at once (so a worker killed a moment later still leaves a
    trial the others can recognise as stale), then the thread beats every interval until
    `track(None)`.
    """

    def __init__(self, storage: BaseStorage):
        inner = cached_backend(storage)
        assert isinstance(inner, BaseHeartbeat), (
            "a storage with a heartbeat (heartbeat_interval says)"
        )
        self.storage = inner
        self._trial_id: int | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._loop, name="ipu-autotune-heartbeat", daemon=True
        )
        self._thread.start()

    def track(self, trial_id: int | None) -> None:
        with self._lock:
            self._trial_id = trial_id
        if trial_id is not None:
            self._beat(trial_id)

    def stop(self) -> None:
        self.track(None)
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self, trial_id: int) -> None:
        try:
            self.storage.record_heartbeat(trial_id)
        except Exception:  # the trial finished meanwhile, or the database blinked: next beat
            pass

    def _loop(self) -> None:
        while not self._stop.wait(
            timeout=self.storage.get_heartbeat_interval() or HEARTBEAT_INTERVAL_S
        ):
            with self._lock:
                trial_id = self._trial_id
            if trial_id is not None:
                self._beat(trial_id)


class HeartbeatJournalStorage(
    DeferredJournalWrites, optuna.storages.JournalStorage, BaseHeartbeat
):
    """Optuna's journal storage with the heartbeat its RDB storage has, and a running trial's
    writes appended together (deferred_writes.py).

    A beat is a trial system attribute holding the worker's clock (epoch seconds), so the
    hosts sharing a journal need synchronised clocks (NTP): a skew must stay well under the
    grace period.
    """

    def __init__(
        self,
        backend: BaseJournalBackend,
        heartbeat_interval: int,
        callback: Callable[[optuna.Study, FrozenTrial], None] | None,
    ) -> None:
        super().__init__(backend)
        self._held_init()
        self.heartbeat_interval = int(heartbeat_interval)
        self.grace_period = self.heartbeat_interval * GRACE_FACTOR
        self.heartbeat_stale_trial_callback = callback

    def record_heartbeat(self, trial_id: int) -> None:
        try:
            # now, not held with the trial's other writes: a beat is only worth its timeliness
            optuna.storages.JournalStorage.set_trial_system_attr(
                self, trial_id, _JOURNAL_BEAT, time.time()
            )
        except (optuna.exceptions.UpdateFinishedTrialError, KeyError):
            pass

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        stale = []
        for t in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            beat = t.system_attrs.get(_JOURNAL_BEAT)
            if not isinstance(beat, (int, float)):
                continue  # never beaten: not run by an ipu-autotune worker
            # A retried trial inherits its original's last beat: it counts from its own start.
            if t.datetime_start is not None:
                beat = max(beat, t.datetime_start.timestamp())
            if now - beat > self.grace_period:
                stale.append(self.get_trial_id_from_study_id_trial_number(study_id, t.number))
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self.heartbeat_interval

    def get_heartbeat_stale_trial_callback(
        self,
    ) -> Callable[[optuna.Study, FrozenTrial], None] | None:
        return self.heartbeat_stale_trial_callback


def retry_trial(study: optuna.Study, trial: FrozenTrial, user_attrs: dict[str, Any]) -> bool:
    """Enqueue `trial`'s parameters again, as a heartbeat-stale trial is (same bookkeeping:
    `RetryHeartbeatStaleTrialCallback.retried_trial_number` names the original). Returns
    False once the configuration has been retried MAX_RETRY times."""
    again = copy.copy(trial)
    again.user_attrs = dict(user_attrs)
    before = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)(study, again)
    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) > before
