"""`ipu-autotune report`: a stored study as one self-contained HTML page."""

from __future__ import annotations

from rich.console import Console

from ..options import ReportOptions
from .common import load_study


def run(args: ReportOptions) -> int:
    from ..report import write_report

    study, problem = load_study(args.storage, args.study)
    path = write_report(study, problem, args.output or f"{args.study}.html")
    Console(stderr=True, highlight=False).print(f"wrote {path}", soft_wrap=True)
    return 0
