"""`ipu-autotune plan -o FILE`: the plan as one self-contained HTML page, its table and a plot
of estimated throughput per IPU count (plotly inline, as the study report: no network)."""

from __future__ import annotations

from collections.abc import Sequence, Set
from pathlib import Path
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ..guide.nofit import layout_text
from ..present.display import html_text
from ..present.plan_view import busiest_tile, chance, notes
from ..problem import Problem
from ..version import __version__
from .page import CSS

if TYPE_CHECKING:
    from ..study.planning import SizePlan


def throughput_figure(plans: Sequence[SizePlan]) -> go.Figure:
    """Samples/s per IPU count where a configuration fits, end to end and the IPUs alone, with
    the throughput error bar; sizes where nothing fits are marked on the axis."""
    fits = [p for p in plans if p.fits and p.measurement.throughput]
    fig = go.Figure()
    if fits:
        lo = [
            (p.measurement.throughput or 0.0) - p.measurement.throughput_interval[0]
            if p.measurement.throughput_interval
            else 0
            for p in fits
        ]
        hi = [
            p.measurement.throughput_interval[1] - (p.measurement.throughput or 0.0)
            if p.measurement.throughput_interval
            else 0
            for p in fits
        ]
        fig.add_scatter(
            name="end to end (estimated)",
            x=[p.ipus for p in fits],
            y=[p.measurement.throughput for p in fits],
            mode="lines+markers",
            error_y=dict(type="data", array=hi, arrayminus=lo, visible=True),
            text=[html_text(layout_text(p.config)) for p in fits],
        )
        fig.add_scatter(
            name="IPUs alone (estimated)",
            x=[p.ipus for p in fits],
            y=[p.measurement.device_throughput or 0 for p in fits],
            mode="lines+markers",
            line=dict(dash="dot"),
        )
    misses = [p.ipus for p in plans if not p.fits]
    if misses:
        fig.add_scatter(
            name="nothing fits",
            x=misses,
            y=[0] * len(misses),
            mode="markers",
            marker=dict(symbol="x", size=10, color="#E45756"),
        )
    fig.update_layout(
        template="plotly_white",
        height=380,
        title="Throughput per IPU count (estimated)",
        xaxis=dict(title="IPUs", type="log", tickvals=[p.ipus for p in plans]),
        yaxis=dict(title="samples/s"),
        margin=dict(l=60, r=20, t=50, b=40),
    )
    return fig


def _row(p: SizePlan, certain: Set[int]) -> str:
    m = p.measurement
    throughput = f"{m.throughput:,.0f}" if p.fits and m.throughput else "-"
    bottleneck = html_text(m.bottleneck or "-") if p.fits else "-"
    return (
        f"<tr><td class='num'>{p.ipus}</td><td>{'yes' if p.fits else 'no'}</td>"
        f"<td class='num'>{p.micro_batch}</td><td>{html_text(layout_text(p.config))}</td>"
        f"<td class='num'>{throughput}</td><td>{bottleneck}</td>"
        f"<td class='num'>{html_text(busiest_tile(m))}</td>"
        f"<td class='num'>{html_text(chance(p, certain))}</td><td>{html_text(p.why)}</td></tr>"
    )


def render_plan(
    problem: Problem,
    plans: Sequence[SizePlan],
    closing: list[str],
    why: list[str],
    certain: Set[int] = frozenset(),
) -> str:
    rows = "".join(_row(p, certain) for p in plans)
    body = [
        f"<h1>Plan: {html_text(problem.model)}</h1>",
        f"<p class='sub'>micro-batch up to {problem.batch_size}, {html_text(problem.optimizer)}, "
        f"{html_text(problem.target)} &middot; ipu-autotune {__version__}</p>",
        "<p class='estimated'>Every figure here is <b>estimated</b> by the analytical IPU model "
        "(no compile, no run).</p>",
        "<table><tr><th>IPUs</th><th>fits</th><th>micro-batch</th><th>layout</th>"
        "<th>samples/s</th><th>bottleneck</th><th>busiest tile</th><th>chance</th><th>why</th>"
        f"</tr>{rows}</table>",
        *[
            f"<p class='sub'>{html_text(line)}</p>"
            for line in notes(plans, problem.batch_size, certain)
        ],
        throughput_figure(plans).to_html(
            full_html=False, include_plotlyjs=False, config={"displaylogo": False}
        ),
    ]
    body += [f"<p><b>{html_text(line)}</b></p>" for line in closing]
    if why:
        body += ["<h2>Why nothing fits</h2>", *[f"<p>{html_text(line)}</p>" for line in why]]
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>ipu-autotune plan: {html_text(problem.model)}</title><style>{CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def write_plan_report(
    problem: Problem,
    plans: Sequence[SizePlan],
    closing: list[str],
    why: list[str],
    path: str | Path,
    certain: Set[int] = frozenset(),
) -> Path:
    """The page shows what the terminal shows: the table with its chance and why columns, the
    notes under it, the closing lines (smallest fit and its tune command, or why nothing fits)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_plan(problem, plans, closing, why, certain), encoding="utf-8")
    return path
