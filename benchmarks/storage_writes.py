"""Storage writes per trial: how many times `ipu-autotune tune` writes to its storage for each
trial, on SQLite (a write is a transaction that changed the database: each one commits and
fsyncs) and on a journal file (a write is one append under the file lock, fsynced).

    python benchmarks/storage_writes.py              # 20 trials of the default run
    python benchmarks/storage_writes.py --trials 60

Counted below Optuna and ipu-autotune both (SQLAlchemy's engine events, the journal file
backend's `append_logs`), so it counts every write whoever makes it: Optuna's per-parameter
writes, our attributes, the tell, the heartbeat. Prints the count per trial and the command.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.storages.journal import JournalFileBackend

STUDY = "resnet101-bs64-2ipu-mk2"
_WRITE_SQL = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class Counter:
    """Write transactions on every SQLAlchemy engine; append calls (and records) on journals."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._dirty: set[int] = set()
        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", self._execute)
        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "commit", self._commit)
        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "rollback", self._rollback)
        original = JournalFileBackend.append_logs

        def append_logs(backend: JournalFileBackend, logs: list[dict[str, Any]]) -> None:
            self.counts["journal appends"] += 1
            self.counts["journal records"] += len(logs)
            original(backend, logs)

        JournalFileBackend.append_logs = append_logs  # type: ignore[method-assign,assignment]  # counting only

    def _execute(
        self,
        conn: Any,
        cursor: Any,
        statement: Any,
        parameters: Any,
        context: Any,
        executemany: Any,
    ) -> None:
        if statement.lstrip().upper().startswith(_WRITE_SQL):
            self._dirty.add(id(conn))

    def _commit(self, conn: Any) -> None:
        if id(conn) in self._dirty:
            self._dirty.discard(id(conn))
            self.counts["sqlite write transactions"] += 1

    def _rollback(self, conn: Any) -> None:
        self._dirty.discard(id(conn))


def run(kind: str, trials: int, folder: Path, counter: Counter) -> tuple[int, int]:
    from ipu_autotune.cli import main as cli

    url = {
        "sqlite": f"sqlite:///{folder / 'w.db'}",
        "journal": f"journal:///{folder / 'w.journal'}",
    }[kind]
    args = [
        "resnet101",
        "--batch-size",
        "64",
        "--seed",
        "0",
        "--quiet",
        "--storage",
        url,
        "--out",
        str(folder / "out"),
    ]
    key = "sqlite write transactions" if kind == "sqlite" else "journal appends"
    # a first run creates the study and its warm-start queue: not per trial
    status = cli([*args, "--trials", "1"])  # 3: nothing fits yet, a normal ending
    before = counter.counts[key]
    if status not in (0, 3) or cli([*args, "--trials", str(trials)]) != 0:
        raise SystemExit("the tune command failed (its error is above)")
    from ipu_autotune.study.storage import open_storage

    done = (
        len(
            optuna.load_study(study_name=STUDY, storage=open_storage(url)).get_trials(
                states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
            )
        )
        - 1
    )
    return counter.counts[key] - before, done


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    args = ap.parse_args()
    counter = Counter()
    print(f"$ python benchmarks/storage_writes.py --trials {args.trials}")
    print(
        "(a study of 1 trial first, so the study's creation and warm-start queue are not counted)"
    )
    for kind in ("sqlite", "journal"):
        with tempfile.TemporaryDirectory() as tmp:
            writes, done = run(kind, args.trials, Path(tmp), counter)
        what = "write transactions" if kind == "sqlite" else "appends (each fsynced)"
        print(f"{kind:>8}: {writes:5d} {what} for {done} trials = {writes / done:.1f} per trial")
    return 0


if __name__ == "__main__":
    sys.exit(main())
