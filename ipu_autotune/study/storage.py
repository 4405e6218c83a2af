"""Optuna storage from a URL: SQLite (one host), a journal file (shared file system) or
PostgreSQL/MySQL (many hosts). Passwords never reach output: use `mask_url`.

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
import re
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import BaseJournalBackend
from optuna.trial import FrozenTrial, TrialState

from ..errors import UsageError
from ..optuna_private import BaseHeartbeat, cached_backend
from .deferred_writes import DeferredCachedStorage, DeferredJournalWrites

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

_URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*):(?P<rest>.*)$", re.IGNORECASE)
_SERVER_SCHEMES = ("postgresql", "postgres", "mysql", "mariadb", "oracle", "mssql", "cockroachdb")


def mask_url(url: str) -> str:
    """postgresql://user:secret@host/db -> postgresql://user:***@host/db

    Works on any text (a URL, or an error message quoting one), copes with passwords that
    hold an unencoded '@', ':' or '/', and masks `password=...` (query strings, libpq).
    """

    def one(m: re.Match[str]) -> str:
        pre, rest = m["pre"], m["rest"]
        first = rest.find("@")
        if first < 0:
            return m[0]
        host_end = len(rest)
        for sep in "/?#":
            at = rest.find(sep, first)
            if at >= 0:
                host_end = min(host_end, at)
        last = rest.rfind("@", 0, host_end)
        user, colon, _ = rest[:last].partition(":")
        if not colon or "/" in user:
            return m[0]
        return f"{pre}{user}:***@{rest[last + 1 :]}"

    text = re.sub(r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s'\"]+)", one, str(url))
    return re.sub(r"(?i)(password\s*=\s*)('[^']*'|\"[^\"]*\"|[^&\s;'\"]+)", r"\1***", text)


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith((".journal", ".log"))


def journal_path(url: str) -> Path:
    return Path(url.split(":", 1)[1].removeprefix("//") if url.startswith("journal:") else url)


def file_missing(url: str) -> bool:
    """A SQLite or journal storage whose file is not there: nothing stored yet. Reading commands
    say so instead of opening it, which would create an empty database in the user's folder."""
    if is_journal(url):
        return not journal_path(url).exists()
    if url.startswith("sqlite:///") and not in_memory(url):
        return not Path(url[len("sqlite:///") :].split("?", 1)[0]).exists()
    return False


def check_url(url: str) -> None:
    """Reject a storage URL that cannot work, without touching it (fast, writes nothing)."""
    if url == "memory:":
        return
    if is_journal(url):
        path = journal_path(url)
        if not str(path) or str(path) in (".", "/") or path.is_dir():
            raise UsageError(
                f"storage {mask_url(url)}: name a journal file, e.g. journal:///shared/study.journal"
            )
        if not path.parent.exists():
            raise UsageError(
                f"storage {mask_url(url)}: folder {path.parent} does not exist; create it "
                "(on a file system every worker mounts)"
            )
        return
    m = _URL.match(url)
    if not m or m["scheme"].lower() in ("http", "https", "file") or not m["rest"].startswith("//"):
        raise UsageError(
            f"storage '{mask_url(url)}' is not a URL Optuna can use; try "
            "sqlite:///ipu-autotune.db, journal:///shared/study.journal or "
            "postgresql://user@host/db"
        )
    scheme = m["scheme"].lower().split("+")[0]
    if scheme == "sqlite":
        db = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not db:
            raise UsageError(
                f"storage {mask_url(url)}: write sqlite:///relative/file.db or "
                "sqlite:////absolute/file.db"
            )
        if db != ":memory:" and not Path(db).resolve().parent.exists():
            raise UsageError(f"storage {mask_url(url)}: folder {Path(db).parent} does not exist")
        return
    if scheme not in _SERVER_SCHEMES:
        raise UsageError(
            f"storage '{mask_url(url)}': unknown database '{m['scheme']}'; use sqlite:///FILE, "
            "journal:///FILE or postgresql://user@host/db"
        )
    try:
        from sqlalchemy.engine import make_url

        make_url(_normalise(url))
    except Exception as exc:  # ArgumentError, ValueError (bad port)...
        raise UsageError(
            f"storage '{mask_url(url)}' cannot be parsed: {mask_url(_first_line(exc))}"
        ) from None


def _normalise(url: str) -> str:
    """postgres://... (Heroku's spelling) is postgresql://... to SQLAlchemy."""
    return "postgresql" + url[len("postgres") :] if url.startswith("postgres:") else url


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


#: the database a URL's scheme names -> (the module SQLAlchemy imports by default, how to install a driver)
_DRIVERS = {
    "postgresql": ("psycopg", "pip install 'ipu-autotune[postgres]'"),
    "cockroachdb": ("psycopg", "pip install 'ipu-autotune[postgres]' sqlalchemy-cockroachdb"),
    "mysql": (
        "MySQLdb",
        "pip install mysqlclient, or write mysql+pymysql://... and pip install pymysql",
    ),
    "mariadb": (
        "MySQLdb",
        "pip install mysqlclient, or write mariadb+pymysql://... and pip install pymysql",
    ),
    "oracle": ("oracledb", "pip install oracledb"),
    "mssql": ("pyodbc", "pip install pyodbc"),
}


def missing_driver(url: str, exc: ImportError) -> str:
    """'missing database driver for mysql (MySQLdb); pip install mysqlclient, ...': the
    database named from the URL, since the ImportError Optuna passes on may not name the
    module (its `name` is then None)."""
    scheme = _normalise(url).split(":", 1)[0].lower()
    database, _, dialect_driver = scheme.partition("+")
    default_module, fix = _DRIVERS.get(
        database, (None, f"install the Python driver for {database}")
    )
    module = exc.name or dialect_driver or default_module
    if dialect_driver:  # the user chose a driver: install that one
        fix = f"pip install {dialect_driver}"
    return (
        f"missing database driver for {database}" + (f" ({module})" if module else "") + f"; {fix}"
    )


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
    url = _normalise(url)
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
        reason = mask_url(_first_line(exc))
        raise UsageError(
            f"storage {mask_url(url)} is unreachable: {reason}; check the host, port, "
            "user and that the database exists"
        ) from None


def in_memory(url: str) -> bool:
    """memory: or sqlite:///:memory:, a storage only this process sees and that goes with it."""
    return url == "memory:" or url.split("?", 1)[0] == "sqlite:///:memory:"


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
