"""Terminal output: small rich renderables composed into the live view and summaries.

Everything here only formats; nothing decides. On a terminal the tune command shows a
progress bar and a live table; elsewhere (CI logs, pipes) one plain line per trial.
NO_COLOR is honoured by rich itself. Stored values reach rich only as terminal text in a
Text (display.py): never as markup, never as a raw escape sequence.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.padding import Padding
from rich.panel import Panel
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

from ..backends.base import CATEGORIES, Measurement, format_bytes
from ..guide.warmstart import is_baseline
from ..problem import Config, Problem
from ..study.records import TrialRecord
from . import trial_line as tl
from .display import terminal_cell, terminal_text
from .wrap import Prose, WholeWords, fit_text


def throughput_text(m: Measurement) -> str:
    if m.throughput is None:
        return "-"
    estimated = m.source != "estimate" and m.details.get("throughput_source") == "estimate"
    return f"{m.throughput:,.0f}/s" + (" (est.)" if estimated else "")


def verdict_text(r: TrialRecord) -> Text:
    v = r.measurement.verdict()
    style = "green" if r.feasible else "red" if r.measurement.failure == "oom" else "yellow"
    return terminal_cell(v, style)


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


_SHORT = {
    "weights": "weights",
    "optimizer": "optim",
    "gradients": "grads",
    "activations": "activ",
    "stash": "stash",
    "temporary": "temp",
    "code/exchange": "code",
}


def tile_fraction(m: Measurement, ipu: int) -> float:
    """The busiest tile's use of tile memory: what the out-of-memory verdict is about."""
    if m.tile_capacity_bytes and m.max_tile_bytes:
        return m.max_tile_bytes[ipu] / m.tile_capacity_bytes
    return m.required_bytes[ipu] / m.capacity_bytes[ipu] if m.capacity_bytes[ipu] else 0.0


def tile_bar(m: Measurement, ipu: int, width: int) -> Text:
    """'████████░░░░ 105%': the busiest tile against tile memory, red when over."""
    fraction = tile_fraction(m, ipu)
    filled = min(width, round(fraction * width))
    style = "green" if fraction <= 0.85 else "yellow" if fraction <= 1.0 else "red"
    text = Text("█" * filled, style=style)
    text.append("░" * (width - filled), style="dim")
    text.append(f" {fraction:.0%}", style="bold" if fraction > 1.0 else "")
    return text


def compact_bytes(n: float) -> str:
    """At most six characters ('775 kB', '1.2 GB'), so a table's figures are never cut."""
    text = format_bytes(n)
    if text.endswith(" kB"):
        return f"{n / 1e3:.0f} kB"
    return text


class MeasurementTable:
    """Per-IPU memory by category, the total, and the busiest tile against tile memory: one
    row per IPU, every figure whole at 80 columns (the tile bar only where there is room)."""

    def __init__(self, m: Measurement, title: str = ""):
        self.m, self.title = m, title

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        m = self.m
        # A compile's profile has its own categories (always-live, not-always-live, gaps).
        shown = [c for c in CATEGORIES if any(c in bd for bd in m.breakdown)] or list(CATEGORIES)
        shown += sorted({k for bd in m.breakdown for k in bd} - set(shown))
        bar_width = 12 if options.max_width >= 4 + 9 * (len(shown) + 1) + 20 else 0
        table = Table(
            title=self.title or None,
            box=box.SIMPLE_HEAD,
            title_justify="left",
            pad_edge=False,
            padding=(0, 0, 0, 1),
            caption="tile: the busiest tile against a tile's memory (OOM is per tile)",
            caption_justify="left",
            caption_style="dim",
        )
        table.add_column("IPU", no_wrap=True)
        for cat in shown:
            table.add_column(terminal_cell(_SHORT.get(cat, cat)), justify="right", no_wrap=True)
        table.add_column("total", justify="right", no_wrap=True)
        table.add_column("tile", no_wrap=True, justify="right" if not bar_width else "left")
        for i, bd in enumerate(m.breakdown):
            cells = [compact_bytes(bd.get(cat, 0)) for cat in shown]
            tile = tile_bar(m, i, bar_width) if bar_width else Text(f"{tile_fraction(m, i):.0%}")
            table.add_row(f"IPU{i}", *cells, compact_bytes(m.required_bytes[i]), tile)
        yield table


def measurement_table(m: Measurement, title: str = "") -> MeasurementTable:
    return MeasurementTable(m, title)


def trial_details(r: TrialRecord, baseline: TrialRecord | None) -> Group:
    """`show --trial N`: everything about one trial, one fact per line."""
    m = r.measurement
    about = terminal_text(f"  {r.origin}  ({r.state.lower()}, {m.source}, {r.seconds:.1f} s)")
    head = Text.assemble((f"trial {r.number}", "bold"), about, "\nverdict: ", verdict_text(r))
    if m.throughput is not None:
        head.append(
            f"\nthroughput: {throughput_text(m)}"
            + (" (estimated)" if m.source == "estimate" else "")
        )
        if m.step_time_s:
            head.append(f", step {m.step_time_s * 1e3:.1f} ms")
    parts: list[RenderableType] = [head]
    config = Table(box=None, show_header=False, pad_edge=False)
    # the knob's name whole (it is what --set and a config file take); its values wrap
    config.add_column(style="dim", no_wrap=True, min_width=max(map(len, r.config.to_dict())))
    config.add_column()
    config.add_column(style="dim")
    before = baseline.config.to_dict() if baseline is not None and baseline is not r else {}
    for key, value in r.config.to_dict().items():
        was = before.get(key, value)
        note = "" if was == value else f"baseline: {_value_text(was)}"
        config.add_row(key, terminal_cell(_value_text(value) or "-"), terminal_cell(note))
    parts.append(config)
    if m.breakdown:
        parts.append(
            measurement_table(
                m, "memory per IPU" + (" (estimated)" if m.source == "estimate" else "")
            )
        )
    return Group(*parts)


def _value_text(value: object) -> str:
    """A config value as terminal text: a list comma-separated, None (not set) empty."""
    if value is None:
        return ""
    return terminal_text(", ".join(map(str, value)) if isinstance(value, list) else value)


def changes(before: Config, after: Config) -> list[str]:
    out = []
    a, b = before.to_dict(every_field=True), after.to_dict(every_field=True)
    for key in a:
        if key == "execution" and after.ipus_per_replica == 1:
            continue  # one IPU has no stages: pipelined or sharded is the same program
        if a[key] != b[key]:
            out.append(f"{key}: {_value_text(a[key]) or '-'} → {_value_text(b[key]) or '-'}")
    return out


def comparison(
    problem: Problem, baseline: TrialRecord, best: TrialRecord, estimated: bool
) -> Table:
    """Baseline and best side by side: verdict, memory bars per IPU, throughput."""
    table = Table(box=box.ROUNDED, show_header=True, header_style="bold")
    table.add_column("")
    table.add_column(f"baseline (trial {baseline.number})")
    table.add_column(f"best (trial {best.number})")
    table.add_row("verdict", verdict_text(baseline), verdict_text(best))
    suffix = " (estimated)" if estimated else ""
    table.add_row(
        "throughput",
        throughput_text(baseline.measurement) + suffix,
        Text(throughput_text(best.measurement) + suffix, style="bold green"),
    )
    from ..host.pipeline import global_batch

    for cfg_name, getter in (
        ("global batch", lambda c: global_batch(problem, c)),
        ("layout", lambda c: f"{c.ipus_per_replica} IPU/replica x {c.replicas}"),
    ):
        table.add_row(cfg_name, str(getter(baseline.config)), str(getter(best.config)))
    ipus = max(len(baseline.measurement.breakdown), len(best.measurement.breakdown))
    for i in range(ipus):
        cells = []
        for r in (baseline, best):
            m = r.measurement
            if i < len(m.breakdown):
                cell = tile_bar(m, i, 10)
                cell.append(f" tile; {format_bytes(m.required_bytes[i])}")
            else:
                cell = Text("")
            cells.append(cell)
        table.add_row(f"IPU{i} memory", *cells)
    table.caption = "memory: the busiest tile's use of a tile (OOM is per tile); the IPU's total"
    table.caption_justify = "left"
    return table


def speedup_line(baseline: TrialRecord, best: TrialRecord) -> str:
    b, t = baseline.measurement.throughput, best.measurement.throughput
    if not b or not t:
        return ""
    return f"{t / b:.1f}x the baseline's throughput"


def indented(line: str, indent: int = 2) -> Padding:
    """A line wrapped at word boundaries, its continuation lines indented like its first (the
    summary's lines, which quote stored values: terminal text)."""
    return Padding(Prose(line), (0, 0, 0, indent), expand=False)


def panel(renderable: RenderableType, title: str) -> Panel:
    return Panel(renderable, title=title, title_align="left", border_style="cyan", expand=False)
