"""Optuna's own storage suite (`optuna/testing/pytest_storages.py`, StorageTestCase: the
contract every Optuna storage meets) run against the storage `tune` opens: `open_storage(URL)`,
for every kind of URL it takes. For the database URLs that is `DeferredCachedStorage`
(study/deferred_writes.py: Optuna's `_CachedStorage` with a running trial's writes held and
written as one transaction), for a journal file `HeartbeatJournalStorage` (the same, as one
append); `memory:` is Optuna's InMemoryStorage as is. The suite creates its trials with
`create_new_trial(study_id)`, as `ask` does, so every trial write it makes is a held one.

A case that fails here is a bug in our storage, or a difference the project chose; each skip
below says which, and a test of ours pins the behaviour instead (issue 45).

PostgreSQL runs when IPU_AUTOTUNE_TEST_POSTGRES_URL is set (`bash .ci/postgres.sh`), each case
in a schema of its own in that database (the suite needs an empty storage; the URL's
`options=-csearch_path=...` is a URL a user may give `tune` too).
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.testing.pytest_storages import StorageTestCase
from testing import NO_POSTGRES, POSTGRES_URL, not_none

from ipu_autotune.errors import UsageError
from ipu_autotune.study.parallel import check_jobs
from ipu_autotune.study.storage import heartbeat_interval, open_storage, set_heartbeat

pytestmark = [pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")]

#: the URL kinds `open_storage` takes. The SQLite ones cost 0.1-0.3 s a case to open (18-37 s
#: for the suite on the loaded two-core machine): slow; the journal (5 s) is the inner loop's.
KINDS = [
    pytest.param("sqlite", marks=pytest.mark.slow),
    pytest.param("sqlite_memory", marks=pytest.mark.slow),
    "journal",
    "memory",
    pytest.param("postgres", marks=[pytest.mark.slow, pytest.mark.postgres]),
]

#: (suite case, URL kind) -> why it is skipped; each names the test of ours that pins it
SKIPS = {
    (
        "test_pickle_storage",
        "sqlite_memory",
    ): "sqlite:///:memory: is the database of one process's connection: a pickled copy opens a "
    "new, empty one (plain Optuna RDBStorage does the same); pinned by "
    "test_an_in_memory_sqlite_storage_is_this_process_own",
}


def _postgres_schema_url(schema: str) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(not_none(POSTGRES_URL))  # called only when it is set
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False
    )


def _postgres(sql: str) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(
        not_none(POSTGRES_URL).replace("postgres://", "postgresql://", 1)
    )
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


class TestStorage(StorageTestCase):
    @pytest.fixture(params=KINDS)
    def storage(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
        kind = request.param
        reason = SKIPS.get((request.function.__name__, kind))
        if reason:
            pytest.skip(reason)
        schema = None
        if kind == "postgres":
            if not POSTGRES_URL:
                pytest.skip(NO_POSTGRES)
            schema = f"conformance_{uuid.uuid4().hex[:12]}"
            _postgres(f"CREATE SCHEMA {schema}")
        url = {
            "sqlite": f"sqlite:///{tmp_path / 'study.db'}",
            "sqlite_memory": "sqlite:///:memory:",
            "journal": f"journal:///{tmp_path / 'study.journal'}",
            "memory": "memory:",
            "postgres": schema and _postgres_schema_url(schema),
        }[kind]
        storage = open_storage(not_none(url))
        yield storage
        engine = getattr(getattr(storage, "_backend", None), "engine", None)
        if engine is not None:
            engine.dispose()
        if schema:
            _postgres(f"DROP SCHEMA {schema} CASCADE")


# --- what the skips above stand for ------------------------------------------------------------


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_in_memory_sqlite_storage_is_this_process_own() -> None:
    """sqlite:///:memory: works as a study storage for one process (it used to fail at the first
    write: switching to write-ahead logging disposed of the connection holding the database),
    without a heartbeat (as memory:; a heartbeat thread's connection would see another, empty
    database), is refused to `--jobs` workers like memory:, and a pickled copy of it is empty,
    as a pickled copy of Optuna's own RDBStorage on that URL is."""
    storage = open_storage("sqlite:///:memory:")
    assert heartbeat_interval(storage) is None
    study = optuna.create_study(storage=storage, study_name="here")
    set_heartbeat(storage, 5)  # what the runner does with a study's stored interval: nothing here
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    assert len(study.trials) == 3 and study.best_value is not None
    assert heartbeat_interval(storage) is None
    for url in ("sqlite:///:memory:", "memory:"):
        with pytest.raises(UsageError, match="--jobs needs a storage the worker processes share"):
            check_jobs(2, url)
    check_jobs(1, "sqlite:///:memory:")
    optunas = optuna.storages.RDBStorage("sqlite:///:memory:")
    optunas.create_new_study([optuna.study.StudyDirection.MINIMIZE], "there")
    for s in (storage, optunas):
        assert pickle.loads(pickle.dumps(s)).get_all_studies() == []
