"""`ipu-autotune plan` as a person reads it: one row per IPU count, every figure estimated."""

from __future__ import annotations

import math
from collections.abc import Sequence, Set
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from ..guide.nofit import layout_text
from . import intervals
from .display import terminal_cell

if TYPE_CHECKING:
    from ..measurement import Measurement
    from ..study.planning import SizePlan


def busiest_tile(m: Measurement) -> str:
    """'82% (72-103%)': the busiest tile's share of a tile, and its error bar."""
    if not m.max_tile_bytes or not m.tile_capacity_bytes:
        return "-"
    worst = m.worst_ipu() or 0  # an IPU: it has tiles
    nominal = f"{m.max_tile_bytes[worst] / m.tile_capacity_bytes:.0%}"
    if not m.max_tile_bytes_interval:
        return nominal
    lo, hi = m.max_tile_bytes_interval[worst]
    return f"{nominal} ({lo / m.tile_capacity_bytes * 100:.0f}-{hi / m.tile_capacity_bytes:.0%})"


def chance(p: SizePlan, certain: Set[int] = frozenset()) -> str:
    """The chance to fit by the error bar; "0%!" where the exact weights alone exceed
    the size's largest replica (guide/least_memory.certainly_over)."""
    if p.ipus in certain:
        return "0%!"
    m = p.measurement
    if m.fit_chance is None:
        return "-"
    # rounded down: 89.95% is not shown as the 90% asked
    return f"{math.floor(m.fit_chance * 100):.0f}%"


def plan_table(
    model: str, plans: Sequence[SizePlan], asked_batch: int, certain: Set[int] = frozenset()
) -> Table:
    table = Table(
        title=f"{model}: the best configuration per IPU count (estimated)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 0, 0, 1),
    )
    for name, right in (
        ("IPUs", True),
        ("mb", True),
        ("layout", False),
        ("samples/s", True),
        ("bottleneck", False),
        ("busiest tile", True),
        ("chance", True),
    ):
        table.add_column(name, justify="right" if right else "left", no_wrap=True)
    for p in plans:
        m = p.measurement
        batch = str(p.micro_batch) + ("" if p.micro_batch == asked_batch else "*")
        speed = (
            terminal_cell(f"{m.throughput:,.0f}", "green")
            if p.fits and m.throughput
            else terminal_cell("no fit", "red")
        )
        table.add_row(
            str(p.ipus),
            batch,
            layout_text(p.config),
            speed,
            terminal_cell(m.bottleneck or "-") if p.fits else "",
            busiest_tile(m),
            chance(p, certain),
        )
    return table


def notes(
    plans: Sequence[SizePlan], asked_batch: int, certain: Set[int] = frozenset()
) -> list[str]:
    """The lines under the table: what the columns mean where it is not obvious."""
    out = [
        "each row: tune --ipus N's own search on the estimate backend (default trials, its "
        "numerics answer); mb: micro-batch; layout: IPUs per replica x replicas; samples/s: end "
        "to end (host input included); busiest tile: its share of a tile's memory (and its "
        "error bar); chance: to fit, by that bar (!: none, whatever the compiler decides)"
    ]
    out += why_lines(plans)
    if any(p.micro_batch != asked_batch for p in plans):
        out.append(f"*: the micro-batch halved from {asked_batch} until a configuration fits")
    uncertain = [p for p in plans if p.fits and p.measurement.straddles_tile_limit]
    if uncertain:
        out.append(
            f"at {', '.join(str(p.ipus) for p in uncertain)} IPUs the best is "
            f"{intervals.UNCERTAIN}"
        )
    return out


def why_lines(plans: Sequence[SizePlan]) -> list[str]:
    """'4, 8 IPUs: ...': each row's reason, sizes with the same reason on one line."""
    grouped: list[tuple[list[int], str]] = []
    for p in plans:
        if not p.why:
            continue
        if grouped and grouped[-1][1] == p.why:
            grouped[-1][0].append(p.ipus)
        else:
            grouped.append(([p.ipus], p.why))
    return [
        f"{', '.join(map(str, sizes))} IPU{'s' if sizes != [1] else ''}: {why}"
        for sizes, why in grouped
    ]
