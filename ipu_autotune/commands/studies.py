"""`ipu-autotune studies`: the studies in a storage, one row each."""

from __future__ import annotations

import io
import json
from typing import Any

import optuna
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from ..options import StudiesOptions
from ..present.display import terminal_cell, terminal_text
from ..study.storage import file_missing, mask_url, open_storage
from .common import console_for


def run(args: StudiesOptions) -> int:
    import optuna

    console = console_for(args)
    rows = []
    if not file_missing(args.storage):  # opening a missing file would create an empty database
        storage = open_storage(args.storage)
        rows = [
            _study_row(storage, s)
            for s in optuna.get_all_study_summaries(storage, include_best_trial=False)
        ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        console.print(f"no studies in {mask_url(args.storage)}")
        return 0
    # The name is what --study takes: never cut. A table while every name fits beside the
    # columns; else each study's name on a line of its own, whole, its figures under it.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("study", no_wrap=True)
    table.add_column("trials", justify="right", no_wrap=True)
    table.add_column("best samples/s", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    for r in rows:
        # Names and states come from the storage: shown as terminal text, never as markup.
        table.add_row(
            terminal_cell(r["study"]), str(r["trials"]), _best(r), terminal_cell(r["state"])
        )
    if _width(table) <= console.width:
        console.print(table)
        return 0
    for r in rows:
        console.print(
            terminal_text(r["study"]), style="bold", soft_wrap=True, markup=False, highlight=False
        )
        best = [] if r["best_throughput"] is None else [f"best {_best(r)} samples/s"]
        console.print(
            terminal_text(", ".join([f"  {r['trials']} trials", *best, r["state"]])),
            markup=False,
            highlight=False,
        )
    return 0


def _width(table: Table) -> int:
    """The table's width with nothing cut: drawn on a console wide enough."""
    wide = Console(width=10_000, file=io.StringIO())
    with wide.capture() as captured:
        wide.print(table)
    return max(map(cell_len, captured.get().splitlines()), default=0)


def _best(row: dict[str, Any]) -> str:
    return "-" if row["best_throughput"] is None else f"{row['best_throughput']:,.0f}"


def _study_row(
    storage: optuna.storages.BaseStorage, summary: optuna.study.StudySummary
) -> dict[str, Any]:
    from optuna.trial import TrialState

    from ..study.records import best_record

    problem = summary.user_attrs.get("problem")
    problem = problem if isinstance(problem, dict) else None
    row: dict[str, Any] = {
        "study": summary.study_name,
        "trials": summary.n_trials,
        "model": problem.get("model") if problem else None,
        "micro_batch": problem.get("batch_size") if problem else None,
        "created": summary.datetime_start.isoformat(timespec="seconds")
        if summary.datetime_start
        else None,
        "best_trial": None,
        "best_throughput": None,
        "state": "not ipu-autotune",
    }
    if not problem:
        return row
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    best = best_record(study, skip_unreadable=True)
    trials = study.get_trials(deepcopy=False)
    running = sum(1 for t in trials if t.state == TrialState.RUNNING)
    # Trials measured; queued warm starts and retries are not yet trials of the study's story.
    row["trials"] = sum(1 for t in trials if t.state.is_finished())
    row["queued"] = sum(1 for t in trials if t.state == TrialState.WAITING)
    if best is not None:
        row["best_trial"], row["best_throughput"] = best.number, best.measurement.throughput
        row["state"] = "fits"
    else:
        row["state"] = "nothing fits" if row["trials"] else "empty"
    if running:
        row["state"] += f", {running} running"
    return row
