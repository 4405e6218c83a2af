"""The report's plots: plotly figures, or a sentence saying why a plot is left out.

plotly reads labels and hover text as HTML, so text taken from the study (memory categories,
Optuna's parameter names and hover text) goes in as display.html_text.
"""

from __future__ import annotations

import warnings

import optuna
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..measurement import CATEGORIES
from ..present.display import html_text
from ..study.records import TrialRecord
from .data import ReportData, step_parts

_COLORS = {  # one colour per memory category, the same in every chart
    "weights": "#4C78A8",
    "optimizer": "#F58518",
    "gradients": "#E45756",
    "activations": "#72B7B2",
    "stash": "#54A24B",
    "temporary": "#EECA3B",
    "code/exchange": "#B279A2",
}
_LAYOUT = dict(
    template="plotly_white",
    height=360,
    margin=dict(l=60, r=20, t=50, b=40),
    legend=dict(orientation="h", y=-0.15),
)


def memory(panels: list[tuple[str, TrialRecord]]) -> go.Figure:
    """Per-IPU bars stacked by category, one panel per trial (baseline, best), with each
    IPU's capacity marked, on a shared scale."""
    fig = make_subplots(
        rows=1, cols=len(panels), subplot_titles=[t for t, _ in panels], shared_yaxes=True
    )
    shown = [
        c for c in CATEGORIES if any(c in b for _, r in panels for b in r.measurement.breakdown)
    ]
    shown += sorted(
        {k for _, r in panels for b in r.measurement.breakdown for k in b} - set(shown)
    )
    for col, (_, rec) in enumerate(panels, start=1):
        m = rec.measurement
        ipus = [f"IPU{i}" for i in range(len(m.breakdown))]
        for cat in shown:
            fig.add_bar(
                name=html_text(cat),
                x=ipus,
                y=[b.get(cat, 0) / 1e6 for b in m.breakdown],
                legendgroup=html_text(cat),
                marker_color=_COLORS.get(cat),
                showlegend=col == 1,
                row=1,
                col=col,
            )
        fig.add_scatter(
            name="IPU capacity",
            x=ipus,
            y=[c / 1e6 for c in m.capacity_bytes],
            mode="markers",
            legendgroup="capacity",
            showlegend=col == 1,
            row=1,
            col=col,
            marker=dict(symbol="line-ew-open", size=60, color="black", line=dict(width=3)),
        )
    fig.update_layout(barmode="stack", yaxis_title="MB", **{**_LAYOUT, "height": 420})
    return fig


def history(study: optuna.Study) -> go.Figure | str:
    """Optuna's optimization history (infeasible trials are drawn apart, in grey)."""
    if not any(
        t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials(deepcopy=False)
    ):
        return "No completed trial yet: nothing to plot."
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = optuna.visualization.plot_optimization_history(
            study, target_name="throughput (samples/s)"
        )
    fig.update_layout(**_LAYOUT)
    return _study_text_escaped(fig)


def importances(study: optuna.Study) -> go.Figure | str:
    """Optuna's parameter importances with PED-ANOVA (no scikit-learn needed); a reason instead
    when the study is too small or its values do not vary."""
    done = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    values = {t.value for t in done}
    if len(done) < 4 or len(values) < 2:
        return (
            f"Parameter importances need at least 4 completed trials whose throughput differs "
            f"(this study has {len(done)} completed, {len(values)} distinct value(s))."
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig = optuna.visualization.plot_param_importances(
                study,
                evaluator=optuna.importance.PedAnovaImportanceEvaluator(),
                target_name="throughput (samples/s)",
            )
    except Exception as exc:  # Optuna refuses e.g. an empty intersection search space
        return f"Parameter importances could not be computed: {exc}"
    if not fig.data or not len(fig.data[0].x or ()):
        return "Parameter importances: no parameter is common to every completed trial."
    fig.update_layout(**_LAYOUT)
    return _study_text_escaped(fig)


_EXTRA = "<extra></extra>"  # plotly's own tag in Optuna's hover templates: hides the trace name


def _study_text_escaped(fig: go.Figure) -> go.Figure:
    """An Optuna figure with the text it took from the study (parameter names, trial
    attributes in hover text) as HTML text; numbers stay numbers."""
    for trace in fig.data:
        for attr in ("x", "y", "text", "hovertext"):
            values = getattr(trace, attr, None)
            if isinstance(values, str):
                trace[attr] = html_text(values)
            elif values is not None and any(isinstance(v, str) for v in values):
                trace[attr] = [html_text(v) if isinstance(v, str) else v for v in values]
        if isinstance(trace.name, str):
            trace.name = html_text(trace.name)
        template = trace.hovertemplate
        if template is not None:
            trace.hovertemplate = (
                [_template(t) for t in template]
                if not isinstance(template, str)
                else _template(template)
            )
    return fig


def _template(text: str) -> str:
    kept = text.endswith(_EXTRA)
    return html_text(text.removesuffix(_EXTRA)) + (_EXTRA if kept else "")


def step_time(data: ReportData) -> go.Figure | str:
    """Where the time goes, per sample (a weight update's parts over its samples, so that
    configurations with different accumulation compare), for the baseline and the best."""
    rows = [
        (label, rec)
        for label, rec in (("baseline", data.baseline), ("best", data.best or data.closest))
        if rec is not None and step_parts(rec)
    ]
    if not rows:
        return (
            "The measurements hold no step-time breakdown (only the estimate backend records one)."
        )

    def per_sample(rec: TrialRecord) -> dict[str, float]:
        c = rec.config
        samples = data.problem.batch_size * c.gradient_accumulation * c.replicas
        return {k: v / samples * 1e6 for k, v in step_parts(rec).items()}

    fig = go.Figure()
    names = sorted(
        {k for _, rec in rows for k in step_parts(rec)},
        key=lambda k: -max(step_parts(r).get(k, 0) for _, r in rows),
    )
    for part in names:
        fig.add_bar(
            name=part,
            y=[f"{label} (trial {rec.number})" for label, rec in rows],
            x=[per_sample(rec).get(part, 0) for _, rec in rows],
            orientation="h",
        )
    # Grouped, not stacked: with an async loader or workers the host input overlaps the IPUs.
    fig.update_layout(
        title="Time per sample by part (estimated; host input overlaps the IPUs "
        "with an async loader or workers)",
        barmode="group",
        xaxis_title="µs per sample (one weight update's time / its samples)",
        **{**_LAYOUT, "height": 300, "legend": dict(orientation="h", y=-0.35)},
    )
    return fig
