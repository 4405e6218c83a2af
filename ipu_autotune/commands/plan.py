"""`ipu-autotune plan MODEL`: how many IPUs the model needs, and how fast it is on each size.

An estimate-only search at each IPU count (guide/nofit.plan: the warm starts' climbs, the
micro-batch halved until something fits), without a study or a compile. Where nothing fits at
any size it says why and what outside the search space would.
"""

from __future__ import annotations

import json

from rich.console import Console

from ..args import problem_from_args
from ..guide.nofit import (
    SIZES,
    closest_plan,
    layout_text,
    levers,
    plan,
    smallest_fit,
    why_nothing_fits,
)
from ..options import PlanOptions
from ..present import plan_view, ui
from ..present.display import terminal_text
from .common import console_for, trace


def run(args: PlanOptions) -> int:
    console = console_for(args)
    problem = problem_from_args(args)
    trace(problem, console)  # a model that cannot be traced fails here, in one line
    with console.status(f"Planning {problem.model} on {', '.join(map(str, SIZES))} IPUs (estimated)…"):
        plans = plan(problem, args.headroom, args.fit_confidence)
        fit = smallest_fit(plans)
        why = "" if fit is not None or not plans else why_nothing_fits(problem, plans)
        closest = None if fit is not None or not plans else closest_plan(plans)
        could = levers(problem, closest, args.headroom, args.fit_confidence) if closest is not None else []
    if args.output:
        from ..report.plan_page import write_plan_report

        path = write_plan_report(problem, plans, why, could, args.output)
        Console(stderr=True, highlight=False).print(f"wrote {path}", soft_wrap=True)
    if args.json:
        print(json.dumps({"problem": problem.to_dict(), "estimated": True, "fit_confidence": args.fit_confidence,
                          "smallest_fit": fit.ipus if fit is not None else None,
                          "sizes": [p.to_dict() for p in plans], "why_nothing_fits": why or None,
                          "levers": could}, indent=2))
        return 0
    console.print(plan_view.plan_table(problem.model, plans, problem.batch_size))
    for line in plan_view.notes(plans, problem.batch_size):
        console.print(ui.indented(line, 0), highlight=False, style="dim")
    if fit is not None:
        console.print(terminal_text(f"smallest size that fits: {fit.ipus} IPU(s), {layout_text(fit.config)}, "
                                    f"{fit.measurement.throughput:,.0f} samples/s (estimated)"), highlight=False)
        console.print(terminal_text(f"tune it: ipu-autotune {problem.model} --batch-size {fit.micro_batch} "
                                    f"--ipus {fit.ipus}"), highlight=False, soft_wrap=True)
    else:
        console.print(f"[bold red]No IPU count up to {max(SIZES)} fits[/] (estimated):", highlight=False)
        for line in [why, *could]:
            console.print(ui.indented(terminal_text(line)), highlight=False)
    return 0
