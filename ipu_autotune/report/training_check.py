"""The report's training check: the curves `verify` stored with the study (the two baseline
seeds and the tuned recipe, held-out loss and accuracy against samples seen), its verdict and
each run's FP16 counts. Stored values are input: each one goes through display.html_text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go

from ..numerics.fp16 import format_percent
from ..present.display import html_text

_LAYOUT = dict(
    template="plotly_white",
    height=360,
    margin=dict(l=60, r=60, t=50, b=40),
    legend=dict(orientation="h", y=-0.2),
)
_STYLE: tuple[dict[str, Any], ...] = (
    {"color": "#4C78A8"},
    {"color": "#4C78A8", "dash": "dot"},
    {"color": "#E45756", "width": 3},
)


def curves(verify: dict[str, Any]) -> go.Figure | str:
    runs = verify.get("runs") or []
    if len(runs) != 3:
        return "The stored check has no curves."
    fig = go.Figure()
    for run, line in zip(runs, _STYLE, strict=True):
        name = html_text(f"{run.get('label')} (seed {run.get('seed')})")
        pts = run.get("points") or []
        x = [p.get("samples") for p in pts]
        fig.add_scatter(x=x, y=[p.get("eval_loss") for p in pts], name=f"{name} loss", line=line)
        fig.add_scatter(
            x=x,
            y=[p.get("eval_accuracy") for p in pts],
            name=f"{name} accuracy",
            yaxis="y2",
            line={**line, "width": 1},
            opacity=0.6,
        )
    low, high = verify.get("loss_band") or (None, None)
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        fig.add_hrect(y0=low, y1=high, fillcolor="#4C78A8", opacity=0.08, line_width=0)
    fig.update_layout(
        title="Held-out loss and accuracy by samples seen (CPU, FP16 emulated)",
        xaxis_title="samples seen",
        yaxis_title="loss",
        yaxis2=dict(title="accuracy", overlaying="y", side="right", range=[0, 1]),
        **_LAYOUT,
    )
    return fig


def _row(run: dict[str, Any]) -> str:
    def pct(part: str, whole: str) -> str:
        total = run.get(whole) or 0
        return format_percent((run.get(part) or 0) / total) if total else "-"

    cells = [
        run.get("label"),
        run.get("seed"),
        run.get("recipe"),
        f"{run.get('samples', 0):,}",
        pct("underflow", "gradient_values"),
        pct("overflow", "gradient_values"),
        pct("lost_updates", "updates"),
        run.get("skipped_updates"),
        f"{run.get('seconds', 0):.1f} s",
    ]
    return "<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in cells) + "</tr>"


def training_check(verify: dict[str, Any], fig_html: Callable[..., Any]) -> list[str]:
    kind = verify.get("kind", "?")
    cls = "fits" if kind == "at parity" else "oom"
    out = [
        "<h2>Training check (verify)</h2>",
        f"<p><b class='{cls}'>{html_text(kind)}</b>: {html_text(verify.get('reason', ''))} (at "
        f"{html_text(verify.get('samples'))} samples; the shaded band is the baseline's over two "
        "seeds)</p>",
        fig_html(curves(verify)),
        "<table><tr><th>run</th><th>seed</th><th>recipe</th><th>samples</th>"
        "<th>gradients underflowed</th><th>overflowed</th><th>updates lost</th>"
        "<th>skipped updates</th><th>time</th></tr>",
        *(_row(r) for r in verify.get("runs") or [] if isinstance(r, dict)),
        "</table>",
    ]
    for title, key in (
        ("Not emulated", "not_emulated"),
        ("FP32, as on the IPU", "fp32_kept"),
        ("Warning about the data", "warnings"),
    ):
        notes = verify.get(key) or []
        if notes:
            out.append(
                f"<p class='note'>{title}: " + "; ".join(html_text(n) for n in notes) + ".</p>"
            )
    return out
