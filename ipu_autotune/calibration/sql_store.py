"""The calibration store in a database (SQLite file, PostgreSQL, MySQL): two tables of our own.

`ipu_autotune_calibration_meta` holds the format; `ipu_autotune_calibration` one row per
compile, keyed by `key` (study identity + trial number), so a second insert of the same
compile is a no-op whichever worker makes it. An SQLite file that holds other tables and
none of ours (the study database itself, say) is refused: it is not a calibration store.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..study.storage import CONNECT_TIMEOUT_S, SQLITE_LOCK_TIMEOUT_S, missing_driver
from .record import FORMAT, check_record, matches
from .refusal import FIX, no_store_yet, refused

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, MetaData, Table

TABLE, META = "ipu_autotune_calibration", "ipu_autotune_calibration_meta"
COLUMNS = {"key", "format", "target", "sdk", "model", "study", "trial", "written", "record"}


def _schema() -> tuple[MetaData, Table, Table]:
    from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

    md = MetaData()
    records = Table(
        TABLE,
        md,
        Column("key", String(512), primary_key=True),
        Column("format", Integer, nullable=False),
        Column("target", String(32), index=True),
        Column("sdk", String(128), index=True),
        Column("model", String(512)),
        Column("study", String(512), index=True),
        Column("trial", Integer),
        Column("written", Float),
        Column("record", Text, nullable=False),
    )
    meta = Table(
        META, md, Column("name", String(64), primary_key=True), Column("value", String(256))
    )
    return md, records, meta


class SqlStore:
    def __init__(self, url: str, create: bool = True):
        from sqlalchemy import create_engine, inspect

        self.url = url
        normal = "postgresql" + url[len("postgres") :] if url.startswith("postgres:") else url
        scheme = normal.split(":", 1)[0].split("+")[0].lower()
        self.sqlite = scheme == "sqlite"
        path = Path(normal[len("sqlite:///") :]) if self.sqlite else None
        if path is not None and not create and not (path.exists() and path.stat().st_size):
            raise no_store_yet(url)
        kwargs: dict[str, Any] = (
            {"connect_args": {"timeout": SQLITE_LOCK_TIMEOUT_S}}
            if self.sqlite
            else {"pool_pre_ping": True, "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
        )
        self.md, self.table, self.meta = _schema()
        try:
            self.engine = create_engine(normal, **kwargs)
            names = set(inspect(self.engine).get_table_names())
        except ImportError as exc:
            why, _, fix = missing_driver(url, exc).partition("; ")
            raise refused(url, why, fix) from None
        except Exception as exc:  # "file is not a database", unreachable server...
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            why = (
                "not an SQLite database (corrupted?)"
                if path is not None and path.exists()
                else f"cannot be read: {first}"
            )
            raise refused(url, why, FIX) from None
        for _ in range(20):  # another worker creating the store right now: let it finish (<= 2 s)
            if (TABLE in names) == (META in names) and (
                TABLE not in names or self._format() is not None
            ):
                break
            time.sleep(0.1)
            names = set(inspect(self.engine).get_table_names())
        self._check(names, create)

    def _format(self) -> str | None:
        from sqlalchemy import select

        try:
            with self.engine.connect() as conn:
                return conn.execute(
                    select(self.meta.c.value).where(self.meta.c.name == "format")
                ).scalar()
        except Exception:  # a table of that name that is not ours
            return "unreadable"

    def _check(self, names: set[str], create: bool) -> None:
        from sqlalchemy import inspect

        if TABLE in names:
            columns = {c["name"] for c in inspect(self.engine).get_columns(TABLE)}
            if not COLUMNS <= columns or META not in names:
                raise refused(
                    self.url,
                    f"its table {TABLE} is not ours (columns {', '.join(sorted(columns))})",
                    FIX,
                )
            got = self._format()
            if got != str(FORMAT):
                raise refused(
                    self.url,
                    f"record format {got}, this ipu-autotune reads {FORMAT}",
                    "use the ipu-autotune that wrote it, or " + FIX,
                )
            return
        if self.sqlite and names:
            raise refused(
                self.url,
                f"holds other tables ({', '.join(sorted(names)[:3])}...) and no calibration store "
                "(a study database?)",
                FIX,
            )
        if not create:
            raise no_store_yet(self.url)
        from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

        # Workers starting together race to create the tables: a loser's create fails on the
        # winner's first table while the winner has yet to make the second, so it tries again
        # (<= 2 s) until both are there; the format row is written once.
        for attempt in range(20):
            try:
                self.md.create_all(self.engine, checkfirst=True)
            except (OperationalError, ProgrammingError):
                pass
            try:
                with self.engine.begin() as conn:
                    conn.execute(self.meta.insert().values(name="format", value=str(FORMAT)))
                return
            except IntegrityError:
                return
            except (OperationalError, ProgrammingError):
                if attempt == 19:
                    raise
                time.sleep(0.1)

    def add(self, record: dict[str, Any]) -> bool:
        from sqlalchemy.exc import IntegrityError

        row = {
            k: record.get(k)
            for k in ("key", "format", "target", "sdk", "model", "study", "trial", "written")
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    self.table.insert().values(**row, record=json.dumps(record, default=float))
                )
            return True
        except IntegrityError:  # another worker (or an earlier run) stored this compile
            return False

    def _where(
        self, target: str | None, sdk: str | None, study: str | None
    ) -> list[ColumnElement[bool]]:
        c = self.table.c
        return [
            cond
            for cond, v in (
                (c.target == target, target),
                (c.sdk == sdk, sdk),
                (c.study == study, study),
            )
            if v is not None
        ]

    def records(
        self, target: str | None = None, sdk: str | None = None, study: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        from sqlalchemy import select

        with self.engine.connect() as conn:
            rows = (
                conn.execute(
                    select(self.table.c.record)
                    .where(*self._where(target, sdk, study))
                    .order_by(self.table.c.written)
                )
                .scalars()
                .all()
            )
        out, bad = [], 0
        for text in rows:
            try:
                r = json.loads(text)
            except ValueError:
                bad += 1
                continue
            if check_record(r) is None and matches(r, target, sdk, study):
                out.append(r)
            else:
                bad += 1
        return out, bad

    def forget(
        self, target: str | None = None, sdk: str | None = None, study: str | None = None
    ) -> int:
        where = self._where(target, sdk, study)
        assert where, "forget names at least one of target, sdk, study"
        with self.engine.begin() as conn:
            return conn.execute(self.table.delete().where(*where)).rowcount

    def close(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.engine.dispose()
