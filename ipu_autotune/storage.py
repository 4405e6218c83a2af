"""Optuna storage from a URL: SQLite (one host), a journal file (shared file system) or
PostgreSQL/MySQL (many hosts). Passwords never reach output: use `mask_url`.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import optuna
from optuna.storages import RetryFailedTrialCallback

from .errors import UsageError

#: a worker that stops beating for this long is presumed dead; its trial is failed and retried
HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 30
MAX_RETRY = 2

_URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*):(?P<rest>.*)$")


def mask_url(url: str) -> str:
    """postgresql://user:secret@host/db -> postgresql://user:***@host/db"""
    return re.sub(r"(//[^:/@]+:)[^@]*(@)", r"\1***\2", url)


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith((".journal", ".log"))


def journal_path(url: str) -> Path:
    return Path(url.split(":", 1)[1].removeprefix("//") if url.startswith("journal:") else url)


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """Open (creating if needed) the storage behind `url`, or raise a one-line UsageError."""
    if url == "memory:":
        return optuna.storages.InMemoryStorage()
    if is_journal(url):
        path = journal_path(url)
        if not path.parent.exists():
            raise UsageError(f"storage {mask_url(url)}: folder {path.parent} does not exist")
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(path)))
    m = _URL.match(url)
    if not m or m["scheme"] in ("http", "https") or not m["rest"].startswith("//"):
        raise UsageError(f"storage '{mask_url(url)}' is not a URL Optuna can use; try "
                         "sqlite:///ipu-autotune.db, journal:///shared/study.journal or "
                         "postgresql://user:password@host/db")
    if m["scheme"] == "sqlite":
        db = url[len("sqlite:///"):]
        if db and db != ":memory:" and not Path(db).resolve().parent.exists():
            raise UsageError(f"storage {url}: folder {Path(db).parent} does not exist")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=GRACE_PERIOD_S,
                failed_trial_callback=RetryFailedTrialCallback(max_retry=MAX_RETRY),
                engine_kwargs={"pool_pre_ping": True} if m["scheme"] != "sqlite" else {},
            )
    except ImportError as exc:
        raise UsageError(f"storage {mask_url(url)}: missing database driver ({exc.name}); "
                         "for PostgreSQL: pip install 'ipu-autotune[postgres]'") from None
    except Exception as exc:  # sqlalchemy raises many types; all mean "cannot use this URL"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"storage {mask_url(url)} is unreachable: {mask_url(reason)[:200]}") from None
