"""`ipu-autotune show`: a stored study's trials, or one trial in full."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

from rich.console import Console

from ..errors import UsageError
from ..options import ShowOptions
from ..present import live_view, ui
from ..present.display import terminal_text
from ..present.outputs import record_json
from ..present.tune_summary import result_line
from ..present.wrap import command_lines
from .common import baseline_of, console_for, load_study, print_unreadable

if TYPE_CHECKING:
    from ..study.records import TrialRecord


def run(args: ShowOptions) -> int:
    from ..study.records import best_record, read_records

    console = console_for(args)
    study, problem = load_study(args.storage, args.study)
    recs, unreadable = read_records(study)
    best = best_record(study, skip_unreadable=True)
    base = baseline_of(recs)
    if args.trial is not None:
        return _show_trial(console, args, recs, unreadable, base)
    if args.json:
        print(
            json.dumps(
                {
                    "study": args.study,
                    "problem": problem.to_dict(),
                    "trials": [record_json(r) for r in recs],
                    "best": record_json(best),
                    "unreadable": list(unreadable.values()),
                },
                indent=2,
            )
        )
        return 0
    print_unreadable(console, unreadable)
    table = live_view.TrialTable(rows=max(1, len(recs)))
    for r in recs:
        table.add(r)
    console.print(table)
    console.print(result_line(best, base, args.study), markup=False)
    if best is not None:
        console.print(
            ui.measurement_table(best.measurement, f"best trial {best.number}: memory per IPU")
        )
    command = shlex.join(
        ["ipu-autotune", "show", "--study", terminal_text(args.study), "--trial", "N"]
    )
    console.print(
        "details of one trial:\n" + command_lines(command, console.width, "  "),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return 0


def _show_trial(
    console: Console,
    args: ShowOptions,
    recs: list[TrialRecord],
    unreadable: dict[int, str],
    base: TrialRecord | None,
) -> int:
    match = [r for r in recs if r.number == args.trial]
    if not match:
        if args.trial in unreadable:
            raise UsageError(f"study '{args.study}': {unreadable[args.trial]}")
        raise UsageError(
            f"study '{args.study}' has no finished trial {args.trial} "
            f"(finished: {', '.join(str(r.number) for r in recs[:20]) or 'none'})"
        )
    r = match[0]
    if args.json:
        print(json.dumps(record_json(r), indent=2))
        return 0
    console.print(ui.trial_details(r, base))
    return 0
