"""What `tune` prints around the live trial table: the header panel before the study runs,
the one-line result and the summary after it (baseline against best, or why nothing fits)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ..guide.nofit import lacks
from ..problem import Problem
from ..study.storage import mask_url
from . import intervals, trial_line as tl, ui
from .display import terminal_text
from .wrap import command_lines

if TYPE_CHECKING:
    import optuna

    from ..backends.base import Backend
    from ..guide.nofit import Change
    from ..measurement import Measurement
    from ..numerics.answer import NumericsAdvice
    from ..study.records import TrialRecord


def result_line(best: TrialRecord | None, base: TrialRecord | None, study_name: str) -> str:
    """One line for `show` and `tune --quiet`, as terminal text (it quotes the stored source)."""
    if best is None:
        return terminal_text(f"{study_name}: nothing fits yet")
    m = best.measurement
    speed = f"{m.throughput:,.0f} samples/s" if m.throughput else "no throughput"
    ratio = f" ({ui.speedup_line(base, best)})" if base and base.measurement.throughput else ""
    return terminal_text(
        f"{study_name}: best trial {best.number} fits, {speed} [{m.source}]{ratio}"
    )


def print_header(
    console: Console,
    problem: Problem,
    backend: Backend,
    study_name: str,
    storage_url: str,
    created: bool,
    study: optuna.Study,
) -> None:
    shape = "x".join(map(str, problem.input_shape))
    if problem.token_inputs:
        decoder = f" ({problem.decoder_seq_len} to the decoder)" if problem.decoder_seq_len else ""
        shape = f"{problem.task}, {problem.seq_len} tokens{decoder}"
    elif problem.task:  # an hf: image model
        shape = f"{problem.task}, {shape}"
    elif problem.inputs:
        shape = ", ".join(problem.inputs)
    gb = f", global batch {problem.global_batch}" if problem.global_batch else ""
    where = "new study" if created else resume_point(study)
    note = " (every figure estimated)" if backend.name == "estimate" else ""
    # The study name is what --study takes: whole on a line of the panel (the wrap breaks at
    # the space before "in"), or, longer than the panel is wide, printed whole under it.
    named = terminal_text(f"study {study_name}")
    inside = len(named) <= console.width - 4
    console.print(
        ui.panel(
            Text.assemble(
                (f"{problem.model}", "bold"),
                f"  micro-batch {problem.batch_size}, {shape}, {problem.optimizer}{gb}\n",
                f"{problem.ipus} x {problem.target.upper()} IPU   backend "
                f"{backend.describe()}{note}\n",
                f"{named} in {mask_url(storage_url)}\n" if inside else "",
                where,
            ),
            "ipu-autotune",
        )
    )
    if not inside:
        console.print(
            f"{named}\nin {mask_url(storage_url)}", soft_wrap=True, markup=False, highlight=False
        )


def resume_point(study: optuna.Study) -> str:
    """'resuming: 12 trials done, next is trial 11': an interrupted trial waits to run again
    under a new number, and waiting trials run first, lowest number first."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    done = sum(1 for t in trials if t.state.is_finished())
    waiting = [t.number for t in trials if t.state == TrialState.WAITING]
    nxt = min(waiting) if waiting else len(trials)
    return f"resuming: {done} trial(s) done, next is trial {nxt}"


def print_summary(
    console: Console,
    problem: Problem,
    base: TrialRecord | None,
    best: TrialRecord | None,
    closest: TrialRecord | None,
    files: Mapping[str, str | Path],
    resume: str,
    estimated: bool,
    ran: int,
    interrupted: bool,
    advice: NumericsAdvice | None = None,
    compiles: Mapping[str, int] | None = None,
    reference: Measurement | None = None,
    helps: Sequence[Change] = (),
    alternative: str = "",
) -> None:
    console.print()
    if best is None:
        _print_nothing_fits(console, base, closest, helps)
    else:
        assert base is not None, "a study with a best has its baseline"
        _print_best(console, problem, base, best, estimated, reference)
    if alternative:
        console.print(ui.indented(alternative), highlight=False)
    if advice is not None:
        from ..numerics.answer import summary_lines

        console.print("[bold]Numerics[/] (from the model's own gradients, measured on the CPU):")
        for line in summary_lines(advice):
            console.print(ui.indented(line), highlight=False)
    console.print()
    if interrupted:
        console.print(f"[yellow]Interrupted after {ran} new trial(s).[/]")
    if compiles:
        console.print(
            f"Compiles this run: {compiles['run']}; screened out by the estimator, not compiled: "
            f"{compiles['saved']}",
            highlight=False,
        )
    for label, path in files.items():
        # soft_wrap: a long path is one line the terminal wraps, so it copies whole (rich would
        # fold it at the console's width, mid-word)
        console.print(f"{label:>8}: {path}", highlight=False, soft_wrap=True)
    console.print(
        command_lines(resume, console.width, "  resume: "),
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


def _print_nothing_fits(
    console: Console,
    base: TrialRecord | None,
    closest: TrialRecord | None,
    helps: Sequence[Change],
) -> None:
    console.print("[bold red]Nothing fits yet.[/]")
    if closest is not None:
        knobs = tl.changed_knobs(base.config if base else None, closest.config)
        console.print(
            ui.indented(f"Closest: trial {closest.number} ({knobs})", 0), highlight=False
        )
        console.print(
            ui.indented(f"it lacks memory: {lacks(closest.measurement)}"), highlight=False
        )
        console.print(ui.measurement_table(closest.measurement, "where the memory goes"))
    if helps:
        console.print("[bold]What would help most[/] (run again with):")
        for change in helps:  # a change without a flag is a statement ("no IPU count fits")
            console.print(
                ui.indented(f"{change.flag}: {change.result}" if change.flag else change.result),
                highlight=False,
            )


def _print_best(
    console: Console,
    problem: Problem,
    base: TrialRecord,
    best: TrialRecord,
    estimated: bool,
    reference: Measurement | None,
) -> None:
    console.print(ui.comparison(problem, base, best, estimated))
    lines = ui.changes(base.config, best.config)
    if lines:
        console.print("[bold]What changed[/] (baseline → best):")
        for line in lines:
            console.print(ui.indented(line), highlight=False)
    speed = ui.speedup_line(base, best)
    if speed:
        console.print(f"[bold green]{speed}[/]" + (" (both estimated)" if estimated else ""))
    from .host_report import lines as end_to_end_lines

    for line in end_to_end_lines(problem, base, best, reference):
        console.print(ui.indented(line), highlight=False)
    bars = intervals.summary_line(base.measurement if base else None, best.measurement)
    if bars:
        console.print(ui.indented(bars), highlight=False)
