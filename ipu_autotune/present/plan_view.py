"""`ipu-autotune plan` as a person reads it: one row per IPU count, every figure estimated."""

from __future__ import annotations

from rich import box
from rich.table import Table

from ..guide.nofit import layout_text
from . import intervals
from .display import terminal_cell


def busiest_tile(m) -> str:
    """'82% (72-103%)': the busiest tile's share of a tile, and its error bar."""
    if not m.max_tile_bytes or not m.tile_capacity_bytes:
        return "-"
    worst = m.worst_ipu()
    nominal = f"{m.max_tile_bytes[worst] / m.tile_capacity_bytes:.0%}"
    if not m.max_tile_bytes_interval:
        return nominal
    lo, hi = m.max_tile_bytes_interval[worst]
    return f"{nominal} ({lo / m.tile_capacity_bytes * 100:.0f}-{hi / m.tile_capacity_bytes:.0%})"


def chance(p, certain=frozenset()) -> str:
    """The chance to fit by the error bar; "0% (certain)" where the exact weights alone exceed
    the size's largest replica (guide/nofit.certainly_over)."""
    if p.ipus in certain:
        return "0% (certain)"
    m = p.measurement
    return f"{m.fit_chance:.0%}" if m.fit_chance is not None else "-"


def plan_table(model: str, plans, asked_batch: int, certain=frozenset()) -> Table:
    table = Table(title=f"{model}: the best configuration per IPU count (estimated)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    for name, right in (("IPUs", True), ("mb", True), ("layout", False), ("samples/s", True),
                        ("bottleneck", False), ("busiest tile", True), ("chance", True), ("why", False)):
        table.add_column(name, justify="right" if right else "left", no_wrap=name != "why")
    for p in plans:
        m = p.measurement
        batch = str(p.micro_batch) + ("" if p.micro_batch == asked_batch else "*")
        speed = terminal_cell(f"{m.throughput:,.0f}", "green") if p.fits and m.throughput else \
            terminal_cell("no fit", "red")
        table.add_row(str(p.ipus), batch, layout_text(p.config), speed,
                      terminal_cell(m.bottleneck or "-") if p.fits else "", busiest_tile(m),
                      chance(p, certain), terminal_cell(p.why or ""))
    return table


def notes(plans, asked_batch: int, certain=frozenset()) -> list[str]:
    """The lines under the table: what the columns mean where it is not obvious."""
    out = ["each row: tune --ipus N's own search on the estimate backend (default trials, its numerics answer); "
           "mb: micro-batch; layout: IPUs per replica x replicas; samples/s: end to end (host input included); "
           "busiest tile: its share of a tile's memory (and its error bar); chance: to fit, by that bar; "
           "why: what changes from the size before"]
    if certain:
        out.append(f"certain: at {', '.join(str(n) for n in sorted(certain))} IPUs the exact weights alone exceed "
                   "the SRAM of the largest replica there, or one weight tensor an IPU's")
    if any(p.micro_batch != asked_batch for p in plans):
        out.append(f"*: the micro-batch halved from {asked_batch} until a configuration fits")
    uncertain = [p for p in plans if p.fits and p.measurement.straddles_tile_limit]
    if uncertain:
        out.append(f"at {', '.join(str(p.ipus) for p in uncertain)} IPUs the best is {intervals.UNCERTAIN}")
    return out
