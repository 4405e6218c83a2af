"""A configuration in the three shapes users need: PopTorch code, TOML, JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..measurement import Measurement
from ..problem import Config, Problem
from . import tomlio
from .python import render_snippet


def summary_line(problem: Problem, m: Measurement, trial: int | None, study: str | None) -> str:
    where = f"Study {study}, trial {trial}: " if study is not None else ""
    speed = f", {m.throughput:,.0f} samples/s" if m.throughput else ""
    label = (
        " (estimated by the analytical IPU model, not compiled)"
        if m.source == "estimate"
        else f" ({m.source})"
    )
    return f"{where}{m.verdict()}{speed}{label}."


def render(
    fmt: str,
    problem: Problem,
    config: Config,
    m: Measurement | None = None,
    trial: int | None = None,
    study: str | None = None,
    notes: Sequence[str] = (),
    base_global_batch: int | None = None,
) -> str:
    summary = summary_line(problem, m, trial, study) if m is not None else ""
    if notes:
        summary = "\n".join([summary, "", *notes]).strip()
    if fmt == "python":
        return render_snippet(problem, config, summary, base_global_batch)
    if fmt == "toml":
        header = (
            "ipu-autotune configuration. "
            + summary
            + "\nCheck it with: ipu-autotune estimate --config THIS_FILE"
        )
        return tomlio.dumps({"problem": problem.to_dict(), "config": config.to_dict()}, header)
    if fmt == "json":
        out = {"problem": problem.to_dict(), "config": config.to_dict()}
        if m is not None:
            out["measurement"] = m.to_dict()
        return json.dumps(out, indent=2) + "\n"
    raise ValueError(fmt)
