"""Terminal output: small rich renderables composed into the live view and summaries.

Everything here only formats; nothing decides. The tune command's live view (a progress bar
and a table on a terminal, one plain line per trial elsewhere) is live_view.py's.
NO_COLOR is honoured by rich itself. Stored values reach rich only as terminal text in a
Text (display.py): never as markup, never as a raw escape sequence.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..backends.base import CATEGORIES, Measurement, format_bytes
from ..problem import Config, Problem
from ..study.records import TrialRecord
from .display import terminal_cell, terminal_text
from .wrap import Prose


def throughput_text(m: Measurement) -> str:
    if m.throughput is None:
        return "-"
    estimated = m.source != "estimate" and m.details.get("throughput_source") == "estimate"
    return f"{m.throughput:,.0f}/s" + (" (est.)" if estimated else "")


def verdict_text(r: TrialRecord) -> Text:
    v = r.measurement.verdict()
    style = "green" if r.feasible else "red" if r.measurement.failure == "oom" else "yellow"
    return terminal_cell(v, style)


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
