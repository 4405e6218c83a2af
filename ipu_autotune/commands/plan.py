"""`ipu-autotune plan MODEL`: how many IPUs the model needs, and how fast it is on each size.

At each IPU count, `tune --ipus N`'s own search on the estimate backend (study/planning: the
same numerics answer, warm starts, sampler and runner, in memory, default trials), the
micro-batch halved until something fits. Where nothing fits at any size it says why, by the
exact model state first, and what outside the search space would bring it closer.
"""

from __future__ import annotations

import dataclasses
import json

from rich.console import Console

from ..guide.least_memory import SIZES, certainly_over
from ..guide.nofit import layout_text
from ..options import DEFAULT_STORAGE, PlanOptions
from ..options.problem_flags import problem_from_options, resume_command
from ..present import plan_view, ui
from ..present.display import terminal_text
from ..problem import Problem
from ..study.plan_advice import nothing_fits_lines
from ..study.planning import SizePlan, plan, smallest_fit
from .common import console_for, trace


def tune_command(problem: Problem, fit: SizePlan) -> str:
    """The `tune` command of the planned problem at the row's size and micro-batch: every flag
    that defines the problem (resume_command), so it opens a study of the same problem key."""
    sized = dataclasses.replace(problem, ipus=fit.ipus, batch_size=fit.micro_batch)
    return resume_command(sized, DEFAULT_STORAGE, sized.slug)


def closing_lines(
    problem: Problem, plans: list[SizePlan], headroom: float, fit_confidence: float | None
) -> tuple[list[str], list[str]]:
    """(the lines under the table, the nothing-fits lines): what the terminal and the HTML show."""
    fit = smallest_fit(plans)
    if fit is not None:
        return [
            f"smallest size that fits: {fit.ipus} IPU(s), {layout_text(fit.config)}, "
            f"{fit.measurement.throughput:,.0f} samples/s (estimated)",
            f"tune it: {tune_command(problem, fit)}",
        ], []
    if not plans:
        return [f"no IPU count up to {max(SIZES)} has a layout for {problem.model}"], []
    return [f"No IPU count up to {max(SIZES)} fits (estimated)"], nothing_fits_lines(
        problem, plans, headroom, fit_confidence
    )


def run(args: PlanOptions) -> int:
    console = console_for(args)
    problem = problem_from_options(args)
    trace(problem, console)  # a model that cannot be traced fails here, in one line
    with console.status(
        f"Planning {problem.model} on {', '.join(map(str, SIZES))} IPUs (estimated)…"
    ):
        plans = plan(problem, args.headroom, args.fit_confidence)
        certain = {p.ipus for p in plans if not p.fits and certainly_over(problem, p.ipus)}
        closing, why = closing_lines(problem, plans, args.headroom, args.fit_confidence)
    if args.output:
        from ..report.plan_page import write_plan_report

        path = write_plan_report(problem, plans, closing, why, args.output, certain)
        Console(stderr=True, highlight=False).print(f"wrote {path}", soft_wrap=True)
    if args.json:
        fit = smallest_fit(plans)
        print(
            json.dumps(
                {
                    "problem": problem.to_dict(),
                    "estimated": True,
                    "fit_confidence": args.fit_confidence,
                    "smallest_fit": fit.ipus if fit is not None else None,
                    "sizes": [
                        {**p.to_dict(), "certainly_no_fit": p.ipus in certain} for p in plans
                    ],
                    "why_nothing_fits": "; ".join(why[:2]) or None,
                    "levers": why[2:],
                    "tune_command": tune_command(problem, fit) if fit is not None else None,
                },
                indent=2,
            )
        )
        return 0
    console.print(plan_view.plan_table(problem.model, plans, problem.batch_size, certain))
    for line in plan_view.notes(plans, problem.batch_size, certain):
        console.print(ui.indented(line, 0), highlight=False, style="dim")
    if why:
        console.print(f"[bold red]{closing[0]}[/]:", highlight=False)
        for line in why:
            console.print(ui.indented(terminal_text(line)), highlight=False)
    else:
        for line in closing:
            console.print(terminal_text(line), highlight=False, soft_wrap=True)
    return 0
