"""CPU per guided compile: what the guide's proposals cost, and whether a change to it kept
its decisions.

Runs the tuner as `tune` runs it with a compiling backend (`search_efficiency.run_strategy`,
"ipu-autotune") on a few develop hidden IPUs of each kind, a short budget each, and prints
per case the CPU seconds of this process and the compiles' throughputs. With `--against REV`
the same cases also run on that commit (a temporary git worktree, in a child process, in the
same run: these machines are noisy), and the report gives the CPU ratio and whether every
compile sequence is the same (a change meant only for speed must keep them). That commit's
benchmarks/ runs its side: a change to the hidden IPUs between the two changes the compiles too.

    python benchmarks/guide_speed.py                       # this tree
    python benchmarks/guide_speed.py --against 9331fe4     # and that commit, with ratios
    python benchmarks/guide_speed.py --cases 1 --budget 3 --against HEAD   # CI smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import search_efficiency as se
from random_ipus import FAMILIES

from ipu_autotune.profiles.trace import profile_for

HERE = Path(__file__).resolve().parent

#: (problem, hidden IPU kind, develop seed or draw): the hand-made kinds, both random families
CASES = [
    ("resnet101-mb64-64px-2ipu", "structural", 0),
    ("resnet50-mb16-224-4ipu", "constants", 1),
    ("resnet101-mb64-64px-2ipu", "knobs", 30000),
    ("vit_b_16-mb8-224-4ipu", "random", 10000),
    ("resnet152-mb16-224-2ipu", "structural", 2),
]


def oracle(kind: str, seed: int) -> Any:
    if kind == "knobs":
        return FAMILIES["knobs"][0](seed)
    if kind == "random":
        return FAMILIES["structural"][0](seed)
    return common.HIDDEN_KINDS[kind](seed)


def run_cases(budget: int, cases: int) -> dict[str, dict[str, Any]]:
    common.quiet_optuna()
    out = {}
    for key, kind, seed in CASES[:cases]:
        problem = se.PROBLEMS[key]
        profile_for(problem)  # the trace is not the guide's cost
        start = time.process_time()
        run = se.run_strategy(
            "ipu-autotune", problem, oracle(kind, seed), seed, budget, 10 * budget
        )
        out[f"{key} [{kind} {seed}]"] = {
            "cpu": time.process_time() - start,
            "compiles": run.compiles,
        }
    return out


def run_at(rev: str, budget: int, cases: int) -> dict[str, dict[str, Any]]:
    """The same cases on commit `rev`, in a worktree of this repository, in a child process."""
    repo = HERE.parent
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), rev],
            check=True,
            capture_output=True,
        )
        try:
            script = tree / "benchmarks" / Path(__file__).name
            if (
                not script.exists()
            ):  # a commit before this benchmark: this one, beside that commit's
                shutil.copy(
                    Path(__file__).resolve(), script
                )  # common.py (which puts its tree first)
            saved = Path(tmp) / "runs.json"
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run(
                [
                    sys.executable,
                    str(script),
                    "--budget",
                    str(budget),
                    "--cases",
                    str(cases),
                    "--json",
                    str(saved),
                ],
                check=True,
                env=env,
                cwd=tree,
                stdout=subprocess.DEVNULL,
            )
            ran: dict[str, dict[str, Any]] = json.loads(saved.read_text())
            return ran
        finally:
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=8, help="compiles per case (default 8)")
    ap.add_argument(
        "--cases", type=int, default=len(CASES), help=f"the first N cases (default {len(CASES)})"
    )
    ap.add_argument("--against", metavar="REV", help="also run on this commit and compare")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    args = ap.parse_args(argv)
    if args.against:  # before any case runs: a typo should not cost the first half
        found = subprocess.run(
            [
                "git",
                "-C",
                str(HERE.parent),
                "rev-parse",
                "--verify",
                "--quiet",
                f"{args.against}^{{commit}}",
            ],
            capture_output=True,
        )
        if found.returncode != 0:
            print(
                f"error: --against {args.against}: not a commit of this repository",
                file=sys.stderr,
            )
            return 2
    if args.json is None or not args.against:  # a child run (--json alone) prints only its table
        common.header(
            "Guide speed: CPU per guided compile",
            "guide_speed.py",
            sys.argv[1:] if argv is None else argv,
        )
    started = time.perf_counter()
    here = run_cases(args.budget, args.cases)
    if args.json:
        args.json.write_text(json.dumps(here))
    other = run_at(args.against, args.budget, args.cases) if args.against else None
    headers = ["case", "CPU s", "CPU s / compile"]
    if other is not None:
        headers += [f"CPU s at {args.against}", "ratio", "same compiles"]
    rows = []
    for name, r in here.items():
        row = [name, f"{r['cpu']:.1f}", f"{r['cpu'] / args.budget:.2f}"]
        if other is not None:
            o = other[name]
            row += [
                f"{o['cpu']:.1f}",
                f"{r['cpu'] / o['cpu']:.2f}x",
                "yes" if o["compiles"] == r["compiles"] else "NO",
            ]
        rows.append(row)
    print(
        f"## CPU per guided compile (budget {args.budget}; this process's CPU, the trace "
        "excluded)\n"
    )
    print(common.markdown_table(headers, rows, "lrr" + ("rrl" if other is not None else "")))
    total = sum(r["cpu"] for r in here.values())
    line = (
        f"\nall cases: {total:.1f} s of CPU, {total / (args.budget * len(here)):.2f} s per compile"
    )
    if other is not None:
        before = sum(o["cpu"] for o in other.values())
        same = sum(other[n]["compiles"] == here[n]["compiles"] for n in here)
        line += (
            f"; at {args.against} {before:.1f} s: {total / before:.2f}x; same compiles in "
            f"{same} of {len(here)}"
        )
    print(line)
    print(f"\nwall time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
