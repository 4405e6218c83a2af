"""The report as one HTML file: inline CSS, inline plotly.js, no request when opened.

Every value read from the study reaches the page through `_e` (display.html_text), numbers
and enums included: a shared study's records are input, and the report is opened by others.
"""

from __future__ import annotations

import json

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ..present.display import html_text
from ..problem import Config
from ..study.records import TrialRecord
from ..version import __version__
from . import figures
from .data import ReportData, bottleneck
from .training_check import training_check

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 1200px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
.sub { color: #666; } .estimated { background: #fff4d6; padding: 0.4em 0.8em; border-radius: 4px; }
.cards { display: flex; gap: 1em; flex-wrap: wrap; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.8em 1.2em; min-width: 14em; }
.card b { font-size: 1.4em; display: block; } .fits { color: #1a7f37; } .oom { color: #c62828; }
table { border-collapse: collapse; font-size: 0.85em; width: 100%; }
th, td { border-bottom: 1px solid #eee; padding: 0.25em 0.5em; text-align: left; white-space: nowrap; }
th { background: #f6f6f6; position: sticky; top: 0; } td.num { text-align: right; }
tr.best td { background: #e8f5e9; } pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
.note { color: #666; font-style: italic; }
"""  # noqa: E501 (the report's stylesheet, as written out)


def render(data: ReportData) -> str:
    body = [
        f"<h1>{_e(data.name)}</h1>",
        f"<p class='sub'>{_e(_problem_line(data))} &middot; ipu-autotune {__version__}</p>",
    ]
    if data.estimated:
        body.append(
            "<p class='estimated'>Every figure here is <b>estimated</b> by the analytical IPU "
            "model (no compile, no run).</p>"
        )
    body += _summary(data)
    body.append("<h2>Memory per IPU</h2>")
    mem = [(f"baseline (trial {r.number})", r) for r in [data.baseline] if r is not None]
    top = data.best or data.closest
    if top is not None and top is not data.baseline:
        mem.append((f"{'best' if data.best else 'closest to fitting'} (trial {top.number})", top))
    mem = [(label, r) for label, r in mem if r.measurement.breakdown]
    body.append(
        _fig(figures.memory(mem))
        if mem
        else "<p class='note'>No trial recorded a memory breakdown.</p>"
    )
    body.append(
        "<p class='note'>Whether a configuration fits is judged per tile (its busiest tile "
        "against the tile's memory), so an IPU can run out of memory below its total "
        "capacity.</p>"
    )
    body += ["<h2>Bottleneck</h2>", _bottlenecks(data), _fig(figures.step_time(data))]
    if data.verify is not None:
        body += training_check(data.verify, _fig)
    body += ["<h2>Optimization history</h2>", _fig(figures.history(data.study))]
    body += ["<h2>Parameter importances</h2>", _fig(figures.importances(data.study))]
    body += ["<h2>Trials</h2>", _trials(data)]
    if data.best is not None:
        body += [
            f"<h2>Best configuration (trial {data.best.number})</h2>",
            f"<pre>{_e(_toml(data.best.config))}</pre>",
        ]
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>ipu-autotune report: {_e(data.name)}</title><style>{CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _e(value: object) -> str:
    return html_text(value)


def _fig(fig: go.Figure | str) -> str:
    if isinstance(fig, str):
        return f"<p class='note'>{_e(fig)}</p>"
    html: str = fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})
    return html


def _problem_line(data: ReportData) -> str:
    p = data.problem
    return (
        f"{p.model}, micro-batch {p.batch_size}, input {'x'.join(map(str, p.input_shape))}, "
        f"{p.optimizer}, {p.ipus} IPU(s) {p.target}"
    )


def _throughput(r: TrialRecord | None) -> str:
    if r is None or r.measurement.throughput is None or not r.feasible:
        return "does not fit" if r is not None and r.state == "COMPLETE" else "-"
    return f"{r.measurement.throughput:,.0f} samples/s"


def _verdict(r: TrialRecord) -> str:
    cls = "fits" if r.feasible else "oom"
    return f"<span class='{cls}'>{_e(r.measurement.verdict())}</span>"


def _summary(data: ReportData) -> list[str]:
    recs = data.records
    cards = [
        (
            "trials",
            f"{len(recs)}",
            f"{len(data.feasible)} fit, {sum(r.state == 'FAIL' for r in recs)} failed",
        )
    ]
    if data.baseline is not None:
        cards.append(
            (
                f"baseline (trial {data.baseline.number})",
                _throughput(data.baseline),
                data.baseline.measurement.verdict(),
            )
        )
    if data.best is not None:
        speed = ""
        base = data.baseline
        best = data.best.measurement.throughput
        if base is not None and base.feasible and base.measurement.throughput and best is not None:
            speed = f"{best / base.measurement.throughput:.2f}x the baseline"
        cards.append((f"best (trial {data.best.number})", _throughput(data.best), speed or "fits"))
    out = ["<h2>Summary</h2>", "<div class='cards'>"]
    out += [f"<div class='card'>{_e(t)}<b>{_e(v)}</b>{_e(s)}</div>" for t, v, s in cards]
    out.append("</div>")
    if data.best is None:
        c = data.closest
        out.append(
            "<p><b>No configuration fits yet.</b>"
            + (f" Closest: trial {c.number}, {_e(c.measurement.verdict())}." if c else "")
            + "</p>"
        )
    elif data.baseline is not None and data.baseline is not data.best:
        diffs = _changes(data.baseline.config, data.best.config)
        if diffs:
            out.append(
                "<p>The best differs from the baseline in: "
                + "; ".join(_e(d) for d in diffs)
                + ".</p>"
            )
    return out


def _changes(before: Config, after: Config) -> list[str]:
    a, b = before.to_dict(), after.to_dict()
    return [f"{k} {_plain(a[k])} → {_plain(b[k])}" for k in a if a[k] != b.get(k)]


def _plain(v: object) -> str:
    return ", ".join(map(str, v)) or "-" if isinstance(v, (list, tuple)) else str(v)


def _bottlenecks(data: ReportData) -> str:
    rows = []
    for label, r in (("baseline", data.baseline), ("best", data.best)):
        if r is None:
            continue
        found = bottleneck(r)
        if found:
            name, share = found
            rows.append(
                f"<li>{label} (trial {r.number}): <b>{_e(name)}</b>"
                + (_e(f", {share:.0%} of the step") if share == share else "")
                + "</li>"
            )
    if not rows:
        return (
            "<p class='note'>The measurements do not name a bottleneck; the step time below "
            "shows where the time goes.</p>"
        )
    return "<ul>" + "".join(rows) + "</ul>"


_COLUMNS = (
    "trial",
    "origin",
    "state",
    "verdict",
    "throughput",
    "source",
    "precision",
    "IPUs",
    "accumulation",
    "device iter.",
    "recompute",
    "AMP",
    "seconds",
)


def _trials(data: ReportData) -> str:
    best = data.best.number if data.best else None
    head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    rows = []
    for r in data.records:
        c, m = r.config, r.measurement
        cells = [
            _e(r.number),
            _e(r.origin),
            _e(r.state),
            _verdict(r),
            _e(f"{m.throughput:,.0f}" if m.throughput is not None and r.feasible else "-"),
            _e(m.source),
            _e(c.precision),
            _e(f"{c.ipus_per_replica}x{c.replicas}"),
            _e(c.gradient_accumulation),
            _e(c.device_iterations),
            _e(c.recompute),
            _e(", ".join(f"{a:g}" for a in c.available_memory_proportion)),
            _e(f"{r.seconds:.2f}"),
        ]
        cls = " class='best'" if r.number == best else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    table = (
        "<div style='max-height: 32em; overflow: auto'>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table></div>"
    )
    if data.unreadable:  # left out, each with its reason (study/records.read_records)
        table += (
            f"<p class='note'>{len(data.unreadable)} trial(s) left out, their stored records "
            "unreadable:</p><ul>"
            + "".join(f"<li>{_e(reason)}</li>" for reason in data.unreadable.values())
            + "</ul>"
        )
    return table


def _toml(config: Config) -> str:
    lines = ["[config]"]
    for k, v in config.to_dict().items():
        lines.append(f"{k} = {json.dumps(v)}")
    return "\n".join(lines)
