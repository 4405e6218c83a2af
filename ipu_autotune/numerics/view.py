"""The numerics advice as a rich renderable: loss scale vs FP16 underflow/overflow, and the three
recommendations with their reasons. Formatting only; the other modules decide."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .answer import NumericsAdvice
from .fp16 import format_percent, format_scale

#: scales shown besides the recommended one: every 4 binades from 1 to 2^24
SHOWN_EXPONENTS = (0, 4, 8, 12, 16, 20, 24)


def scale_table(advice: NumericsAdvice) -> Table:
    """A few loss scales: the non-zero gradients lost or subnormal in FP16, and overflow."""
    chosen = advice.loss_scale.scale
    shown = {2.0**k for k in SHOWN_EXPONENTS} | {chosen}
    table = Table(
        "loss scale",
        "lost (<2^-24)",
        "subnormal (<2^-14)",
        "overflow (>65504)",
        box=box.SIMPLE_HEAD,
        title="FP16 gradients by loss scale",
        title_justify="left",
    )
    for row in advice.table:
        if row.scale not in shown:
            continue
        style = "bold green" if row.scale == chosen else None
        overflow = Text("yes", style="red") if row.overflow else Text("no")
        lost = Text(format_percent(row.flushed), style="yellow" if row.flushed > 0.01 else "")
        table.add_row(
            format_scale(row.scale) + (" ←" if row.scale == chosen else ""),
            lost,
            format_percent(row.subnormal),
            overflow,
            style=style,
        )
    return table


def recommendations(advice: NumericsAdvice) -> Table:
    ls, sr, pa = advice.loss_scale, advice.stochastic_rounding, advice.partials
    table = Table(
        "setting",
        "choice",
        "why",
        box=box.SIMPLE_HEAD,
        show_lines=False,
        title="Recommendations",
        title_justify="left",
    )
    scale = f"auto (start {format_scale(ls.scale)})" if ls.auto else format_scale(ls.scale)
    table.add_row("loss scaling", Text(scale, style="bold"), ls.reason)
    table.add_row(
        "stochastic rounding", Text("on" if sr.recommend else "off", style="bold"), sr.reason
    )
    table.add_row("partials", Text(pa.recommend, style="bold"), pa.reason)
    return table


def render(advice: NumericsAdvice) -> RenderableType:
    context = Text(
        f"{advice.model}: {advice.steps} FP32 steps at batch {advice.batch_used} on the CPU, "
        f"{advice.optimizer} lr {advice.lr:g}; max |gradient| {advice.max_abs_grad:.3g}, drift "
        f"across steps {advice.drift_binades} binade{'' if advice.drift_binades == 1 else 's'}",
        style="dim",
    )
    note = Text(
        "Stochastic rounding applies to FP16 weights (16.16); loss scaling and partials to "
        "FP16 compute (16.x).",
        style="dim",
    )
    return Group(context, scale_table(advice), recommendations(advice), note)
