"""The live view of a tune run: a progress bar and a table of the last trials on a terminal
(or in Jupyter with ipywidgets), one plain line per trial elsewhere (CI logs, pipes)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ..guide.warmstart import is_baseline
from ..problem import Config
from ..study.records import TrialRecord
from . import trial_line as tl
from .display import terminal_cell
from .ui import throughput_text
from .wrap import WholeWords, fit_text


class TrialTable:
    """The last few trials, one line each (the knobs that differ from the baseline), the best
    of the whole study marked. `running` holds trials being measured now, shown after the
    finished ones (empty unless a caller runs trials in parallel)."""

    def __init__(self, rows: int = 12):
        self.recent: deque[TrialRecord] = deque(maxlen=rows)
        self.best: TrialRecord | None = None
        self.baseline: Config | None = None
        self.running: dict[int, tuple[Config, str]] = {}

    def seed(self, records: list[TrialRecord]) -> None:
        """Trials finished before this run (a resume): they count for the best and the baseline."""
        for r in records:
            self._note(r)

    def add(self, r: TrialRecord) -> None:
        self.recent.append(r)
        self.running.pop(r.number, None)
        self._note(r)

    def _note(self, r: TrialRecord) -> None:
        if is_baseline(r.origin) and self.baseline is None:
            self.baseline = r.config
        if r.feasible and (
            self.best is None
            or (r.measurement.throughput or 0) > (self.best.measurement.throughput or 0)
        ):
            self.best = r

    def is_best(self, r: TrialRecord) -> bool:
        return self.best is not None and self.best.number == r.number

    def changes(self, r: TrialRecord) -> str:
        if is_baseline(r.origin):
            return tl.baseline_knobs(r.config)
        return tl.changed_knobs(self.baseline, r.config)

    def line(self, r: TrialRecord) -> str:
        """The plain form of a row, for logs and pipes (the caller crops it to the width)."""
        star = "★" if self.is_best(r) else " "
        return (
            f"trial {r.number:>3} {star} {tl.short_label(r)[:8]:<8} "
            f"{tl.short_verdict(r.measurement):<16} {tl.short_throughput(r.measurement):>8}/s "
            f"{tl.short_source(r.measurement.source)} {self.changes(r)}"
        )

    def best_line(self) -> Text:
        if self.best is None:
            return Text(
                "best so far: nothing fits yet", style="dim", no_wrap=True, overflow="ellipsis"
            )
        b = self.best
        return Text.assemble(
            ("★ best so far: ", "bold"),
            f"trial {b.number}  ",
            (throughput_text(b.measurement), "bold green"),
            f"  {self.changes(b)}",
            no_wrap=True,
            overflow="ellipsis",
        )

    def __rich__(self) -> RenderableType:
        table = Table(box=box.SIMPLE_HEAD, expand=True, pad_edge=False, padding=(0, 0, 0, 1))
        table.add_column("#", justify="right", no_wrap=True, min_width=4)
        table.add_column("origin", style="dim", no_wrap=True, max_width=8, overflow="crop")
        table.add_column("verdict", no_wrap=True, min_width=16, max_width=16, overflow="ellipsis")
        table.add_column("samples/s", justify="right", no_wrap=True, min_width=9)
        table.add_column("src", style="dim", no_wrap=True, min_width=3)
        table.add_column("changes from the baseline", no_wrap=True, overflow="ellipsis", ratio=1)
        for r in self.recent:
            mark = "★ " if self.is_best(r) else ""
            style = (
                "green" if r.feasible else "red" if r.measurement.failure == "oom" else "yellow"
            )
            table.add_row(
                f"{mark}{r.number}",
                terminal_cell(tl.short_label(r)),
                terminal_cell(tl.short_verdict(r.measurement), style),
                tl.short_throughput(r.measurement),
                terminal_cell(tl.short_source(r.measurement.source)),
                WholeWords(self.changes(r)),
            )
        for number, (config, origin) in sorted(self.running.items()):
            table.add_row(
                str(number),
                terminal_cell(tl.short_origin(origin)),
                Text("running", style="cyan"),
                "",
                "",
                WholeWords(tl.changed_knobs(self.baseline, config)),
            )
        return table


class _BestLine:
    def __init__(self, table: TrialTable):
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield fit_text(self.table.best_line(), options.max_width)


def _jupyter_widgets(console: Console) -> bool:
    """In Jupyter rich draws a live display in an ipywidgets output widget; without ipywidgets
    it would draw nothing, so the trials are printed as lines instead."""
    if not console.is_jupyter:
        return False
    import importlib.util

    return importlib.util.find_spec("ipywidgets") is not None


class TuneView:
    """Live progress for the tune command; plain lines when not on a terminal."""

    def __init__(
        self,
        console: Console,
        total: int,
        quiet: bool = False,
        earlier: Sequence[TrialRecord] = (),
    ):
        self.console = console
        self.quiet = quiet
        self.table = TrialTable()
        self.table.seed(list(earlier))  # after a resume, stars count the whole study
        self.progress = Progress(
            TextColumn("[bold]trials"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[running]}"),
            console=console,
        )
        self.task = self.progress.add_task("trials", total=total, running="")
        self.live: Live | None = None
        self.started = time.monotonic()

    def __enter__(self) -> TuneView:
        if not self.quiet and (self.console.is_terminal or _jupyter_widgets(self.console)):
            # rich's default rate: each frame renders the whole table, in a thread that holds
            # the GIL while it does (8 a second cost the estimate backend's trials a sixth)
            self.live = Live(
                Group(self.table, _BestLine(self.table), self.progress),
                console=self.console,
                refresh_per_second=4,
                transient=False,
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            # rich's Live.stop() draws a last frame on a terminal but not in Jupyter, where the
            # widget would keep the refresh thread's last frame (trials finished since missing)
            if self.console.is_jupyter:
                self.live.refresh()
            self.live.__exit__(*exc)

    def show_running(self, numbers: list[int]) -> None:
        """Trials other worker processes are measuring now (tune --jobs)."""
        text = f"running: {', '.join(map(str, numbers))}" if numbers else ""
        self.progress.update(self.task, running=text)

    def __call__(self, r: TrialRecord) -> None:
        self.table.add(r)
        self.progress.advance(self.task)
        if self.live is None and not self.quiet:
            self.console.print(
                tl.fit_words(self.table.line(r), self.console.width),
                highlight=False,
                markup=False,
                no_wrap=True,
                crop=True,
            )
