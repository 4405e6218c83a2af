"""Terminal output: small rich renderables composed into the live view and summaries.

Everything here only formats; nothing decides. On a terminal the tune command shows a
progress bar and a live table; elsewhere (CI logs, pipes) one plain line per trial.
NO_COLOR is honoured by rich itself.
"""

from __future__ import annotations

import time
from collections import deque

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from .backends.base import CATEGORIES, Measurement, format_bytes
from .problem import Config, Problem
from .study import TrialRecord


def memory_bar(used: int, capacity: int, width: int = 22, label: bool = True) -> Text:
    """'██████████░░░░ 812 MB / 940 MB' coloured by headroom; over capacity in red."""
    fraction = used / capacity if capacity else 0.0
    filled = min(width, round(fraction * width))
    style = "green" if fraction <= 0.85 else "yellow" if fraction <= 1.0 else "red"
    text = Text("█" * filled, style=style)
    text.append("░" * (width - filled), style="dim")
    if not label:
        return text
    text.append(f" {format_bytes(used)} / {format_bytes(capacity)}")
    if fraction > 1.0:
        text.append(f" (+{format_bytes(used - capacity)})", style="red")
    return text


def effective_bytes(m: Measurement, ipu: int) -> int:
    """What the IPU would need if every tile were as full as its busiest: what OOM compares."""
    if m.tile_capacity_bytes and m.max_tile_bytes:
        tiles = m.capacity_bytes[ipu] // m.tile_capacity_bytes
        return m.max_tile_bytes[ipu] * tiles
    return m.required_bytes[ipu]


def throughput_text(m: Measurement) -> str:
    if m.throughput is None:
        return "-"
    estimated = m.source != "estimate" and m.details.get("throughput_source") == "estimate"
    return f"{m.throughput:,.0f}/s" + (" (est.)" if estimated else "")


def knobs_summary(c: Config) -> str:
    parts = [c.precision]
    if c.half_compute and c.partials == "half":
        parts.append("half-partials")
    if c.ipus_per_replica > 1:
        parts.append(f"{c.ipus_per_replica}ipu-{'pipe' if c.execution == 'pipelined' else 'shard'}")
    if c.replicas > 1:
        parts.append(f"x{c.replicas}rep")
    parts.append(f"ga{c.gradient_accumulation}")
    if c.device_iterations > 1:
        parts.append(f"di{c.device_iterations}")
    if c.recompute != "default":
        parts.append(f"rc:{c.recompute}")
    if c.checkpoints:
        parts.append(f"{len(c.checkpoints)}ckpt")
    if any(a != 0.6 for a in c.available_memory_proportion):
        parts.append("amp " + "/".join(f"{a:g}" for a in c.available_memory_proportion))
    if c.optimizer_offload:
        parts.append("offload")
    if c.replicated_tensor_sharding:
        parts.append("rts")
    if c.eight_bit_io:
        parts.append("8bit")
    if c.io_tiles:
        parts.append(f"io{c.io_tiles}")
    return " ".join(parts)


def verdict_text(r: TrialRecord) -> Text:
    v = r.measurement.verdict()
    style = "green" if r.feasible else "red" if r.measurement.failure == "oom" else "yellow"
    return Text(v, style=style)


class TrialTable:
    """The last few trials, with the best so far marked."""

    def __init__(self, rows: int = 12):
        self.recent: deque[TrialRecord] = deque(maxlen=rows)
        self.best: TrialRecord | None = None

    def add(self, r: TrialRecord) -> None:
        self.recent.append(r)
        if r.feasible and (self.best is None or (r.measurement.throughput or 0) > (self.best.measurement.throughput or 0)):
            self.best = r

    def best_line(self) -> Text:
        if self.best is None:
            return Text("best so far: nothing fits yet", style="dim")
        b = self.best
        return Text.assemble(("★ best so far: ", "bold"), f"trial {b.number}  ",
                             (throughput_text(b.measurement), "bold green"), f"  {knobs_summary(b.config)}")

    def __rich__(self) -> RenderableType:
        table = Table(box=box.SIMPLE_HEAD, expand=False, pad_edge=False)
        table.add_column("#", justify="right")
        table.add_column("origin", style="dim", max_width=26, no_wrap=True, overflow="ellipsis")
        table.add_column("configuration", max_width=58, overflow="fold")
        table.add_column("verdict", max_width=28, overflow="ellipsis", no_wrap=True)
        table.add_column("throughput", justify="right")
        table.add_column("source", style="dim")
        for r in self.recent:
            mark = "★ " if self.best is r else ""
            table.add_row(f"{mark}{r.number}", r.origin, knobs_summary(r.config), verdict_text(r),
                          throughput_text(r.measurement), r.measurement.source)
        return table


class _BestLine:
    def __init__(self, table: TrialTable):
        self.table = table

    def __rich__(self) -> Text:
        return self.table.best_line()


class TuneView:
    """Live progress for the tune command; plain lines when not on a terminal."""

    def __init__(self, console: Console, total: int, quiet: bool = False):
        self.console = console
        self.quiet = quiet
        self.table = TrialTable()
        self.progress = Progress(
            TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[running]}"),
            console=console,
        )
        self.task = self.progress.add_task("trials", total=total, running="")
        self.live: Live | None = None
        self.started = time.monotonic()

    def __enter__(self) -> "TuneView":
        if not self.quiet and self.console.is_terminal:
            self.live = Live(Group(self.table, _BestLine(self.table), self.progress), console=self.console,
                             refresh_per_second=8, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def show_running(self, numbers: list[int]) -> None:
        """Trials other worker processes are measuring now (tune --jobs)."""
        text = f"running: {', '.join(map(str, numbers))}" if numbers else ""
        self.progress.update(self.task, running=text)

    def __call__(self, r: TrialRecord) -> None:
        self.table.add(r)
        self.progress.advance(self.task)
        if self.live is None and not self.quiet:
            best = "★" if self.table.best is r else " "
            self.console.print(f"trial {r.number:>4} {best} {r.origin[:22]:<22}  {knobs_summary(r.config):<44}  "
                               f"{r.measurement.verdict():<22}  {throughput_text(r.measurement):>11}  "
                               f"{r.measurement.source}", highlight=False, soft_wrap=True)


_SHORT = {"weights": "weights", "optimizer": "optim", "gradients": "grads", "activations": "activ",
          "stash": "stash", "temporary": "temp", "code/exchange": "code"}


def measurement_table(m: Measurement, title: str = "") -> Table:
    """Per-IPU memory by category, the total, and the busiest tile against capacity."""
    table = Table(title=title or None, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("IPU")
    # A compile's profile has its own categories (always-live, not-always-live, gaps).
    shown = [c for c in CATEGORIES if any(c in bd for bd in m.breakdown)] or list(CATEGORIES)
    shown += sorted({k for bd in m.breakdown for k in bd} - set(shown))
    for cat in shown:
        table.add_column(_SHORT.get(cat, cat), justify="right", no_wrap=True)
    table.add_column("total", justify="right", no_wrap=True)
    table.add_column("busiest tile", no_wrap=True)
    for i, bd in enumerate(m.breakdown):
        cells = [format_bytes(bd.get(cat, 0)) for cat in shown]
        need = effective_bytes(m, i)
        bar = memory_bar(need, m.capacity_bytes[i], width=12, label=False)
        bar.append(f" {need / m.capacity_bytes[i]:.0%}", style="bold" if need > m.capacity_bytes[i] else "")
        table.add_row(f"IPU{i}", *cells, format_bytes(m.required_bytes[i]), bar)
    return table


def changes(before: Config, after: Config) -> list[str]:
    out = []
    a, b = before.to_dict(), after.to_dict()
    for key in a:
        if a[key] != b[key]:
            fmt = lambda v: ", ".join(map(str, v)) if isinstance(v, list) else str(v)
            out.append(f"{key}: {fmt(a[key]) or '-'} → {fmt(b[key]) or '-'}")
    return out


def comparison(problem: Problem, baseline: TrialRecord, best: TrialRecord, estimated: bool) -> Table:
    """Baseline and best side by side: verdict, memory bars per IPU, throughput."""
    table = Table(box=box.ROUNDED, show_header=True, header_style="bold")
    table.add_column("")
    table.add_column(f"baseline (trial {baseline.number})")
    table.add_column(f"best (trial {best.number})")
    table.add_row("verdict", verdict_text(baseline), verdict_text(best))
    suffix = " (estimated)" if estimated else ""
    table.add_row("throughput", throughput_text(baseline.measurement) + suffix,
                  Text(throughput_text(best.measurement) + suffix, style="bold green"))
    for cfg_name, getter in (("global batch", lambda c: problem.batch_size * c.gradient_accumulation * c.replicas),
                             ("layout", lambda c: f"{c.ipus_per_replica} IPU/replica x {c.replicas}")):
        table.add_row(cfg_name, str(getter(baseline.config)), str(getter(best.config)))
    ipus = max(len(baseline.measurement.breakdown), len(best.measurement.breakdown))
    for i in range(ipus):
        cells = []
        for r in (baseline, best):
            m = r.measurement
            cells.append(memory_bar(effective_bytes(m, i), m.capacity_bytes[i]) if i < len(m.breakdown) else Text(""))
        table.add_row(f"IPU{i} memory", *cells)
    return table


def speedup_line(baseline: TrialRecord, best: TrialRecord) -> str:
    b, t = baseline.measurement.throughput, best.measurement.throughput
    if not b or not t:
        return ""
    return f"{t / b:.1f}x the baseline's throughput"


def panel(renderable: RenderableType, title: str) -> Panel:
    return Panel(renderable, title=title, title_align="left", border_style="cyan", expand=False)
