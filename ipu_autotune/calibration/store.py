"""Where the calibration store lives: the same URL kinds as the study storage
(study/storage.py), and a default beside it.

Default: next to the study storage. `sqlite:///DIR/NAME.db` -> `sqlite:///DIR/NAME-calibration.db`
(a file of its own: it outlives the studies, so deleting or copying a study database leaves
it alone, and its writes never wait on the study database's lock); a journal
`DIR/NAME.journal` -> `DIR/NAME-calibration.journal` (JSON lines, one record a line); a
database server -> the same database (its own tables, `ipu_autotune_calibration*`), since
workers on many hosts reach nothing else in common. `memory:` has none.

A store that is not one (a corrupted file, another program's database, another format) is
refused with `refusal.StoreRefused`: one line naming it and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from ..errors import UsageError
from ..study.storage import check_url, is_journal, journal_path


class Store(Protocol):
    url: str

    def add(self, record: dict[str, Any]) -> bool:
        """Store `record` unless its key is there; True when it was added."""

    def records(
        self, target: str | None = None, sdk: str | None = None, study: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """(readable records matching, how many stored ones were unreadable)."""

    def forget(
        self, target: str | None = None, sdk: str | None = None, study: str | None = None
    ) -> int:
        """Remove the records matching every filter given (at least one), in one step; how many."""

    def close(self) -> None: ...


def default_url(storage_url: str) -> str | None:
    """The calibration store beside a study storage (None for `memory:`)."""
    if storage_url == "memory:":
        return None
    if is_journal(storage_url):
        path = journal_path(storage_url)
        return f"journal:///{path.with_name(path.stem + '-calibration.journal')}".replace(
            "////", "///"
        )
    if storage_url.startswith("sqlite:///"):
        db = Path(storage_url[len("sqlite:///") :])
        if str(db) == ":memory:":
            return None
        return "sqlite:///" + str(db.with_name(db.stem + "-calibration" + (db.suffix or ".db")))
    return storage_url


def check_store_url(url: str) -> None:
    """A URL that cannot work: one line (UsageError), touching nothing."""
    if url == "memory:":
        raise UsageError(
            "calibration storage memory: keeps nothing across studies; give a file or a "
            "database URL, or --no-calibration"
        )
    check_url(url)


def open_store(url: str, create: bool = True) -> Store:
    """Open the store at `url` (creating it when `create`), or raise StoreRefused/UsageError."""
    check_store_url(url)
    if is_journal(url):
        from .journal_store import JournalStore

        return JournalStore(journal_path(url), url, create)
    from .sql_store import SqlStore

    return SqlStore(url, create)


def summary(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (target, SDK): how many records, fitting ones, models and studies."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        s = out.setdefault(
            (r["target"], r["sdk"]), {"records": 0, "fits": 0, "models": set(), "studies": set()}
        )
        s["records"] += 1
        s["fits"] += bool(r["measured"].get("feasible"))
        s["models"].add(r.get("model", "?"))
        s["studies"].add(r["study"])
    return out
