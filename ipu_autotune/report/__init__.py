"""`ipu-autotune report`: one self-contained HTML page per study (no network when opened).

data.py gathers what the page shows from the stored trials, figures.py draws it with
plotly (Optuna's own plots for history and importances), page.py lays it out.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from ..problem import Problem
from .data import gather
from .page import render


def write_report(study: optuna.Study, problem: Problem, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(gather(study, problem)), encoding="utf-8")
    return path


__all__ = ["write_report", "gather", "render"]
