"""`ipu-autotune numerics MODEL --batch-size N`: the command from its options (options/table.py) to
`numerics.advise` and its view. The analysis itself knows nothing of the command line."""

from __future__ import annotations

import json

from ..numerics.advice import advise
from ..numerics.view import render
from ..options import NumericsOptions
from ..options.problem_flags import problem_from_options


def run(args: NumericsOptions) -> int:
    from .common import console_for

    console = console_for(args)
    problem = problem_from_options(args)
    with console.status(f"{args.steps} FP32 training steps of {problem.model} on the CPU…"):
        advice = advise(problem, lr=args.lr, steps=args.steps, data=args.data, seed=args.seed)
    if args.json:
        print(json.dumps(advice.to_dict(), indent=2))
    else:
        console.print(render(advice))
    return 0
