"""`ipu-autotune numerics MODEL --batch-size N`: the arguments, and the command from them to
`numerics.advise` and its view. The analysis itself knows nothing of the command line."""

from __future__ import annotations

import argparse
import json

from ..args import add_problem_args, positive, problem_from_args
from ..numerics import advise
from ..numerics.view import render


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_args(parser, hardware=False)
    parser.add_argument("--lr", type=positive(float), default=None,
                        help="learning rate (default 0.1 x batch/256 for SGD, 1e-3 for the others)")
    parser.add_argument("--steps", type=positive(int), default=3, help="training steps to measure (default 3)")
    parser.add_argument("--data", metavar="MODULE:FUNCTION",
                        help="function returning (inputs, labels) batches (default: random inputs and labels)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the initialisation and random data")
    parser.add_argument("--json", action="store_true", help="print the advice as one JSON object")


def run(args: argparse.Namespace) -> int:
    from .common import console_for

    console = console_for(args)
    problem = problem_from_args(args)
    with console.status(f"{args.steps} FP32 training steps of {problem.model} on the CPU…"):
        advice = advise(problem, lr=args.lr, steps=args.steps, data=args.data, seed=args.seed)
    if args.json:
        print(json.dumps(advice.to_dict(), indent=2))
    else:
        console.print(render(advice))
    return 0
