"""Where the guide misses the best known: at each proposal, the truth of every candidate it
holds.

Each run: one problem, one hidden-IPU draw of a family, the tuner as `tune` runs it
(search_efficiency.run_strategy's "ipu-autotune") for `--budget` compiles. At each of the
guide's proposals after the first compile returned, while nothing measured is within 5 % of
the best known, every untried candidate in its pool (what its rule chooses among) is run on
the hidden IPU, and the proposal is put in one of four states:

    not gathered   no candidate in the pool fits within 5 % of the best known
    picked         the pick is one of them
    unlikely       it is not, and the guide gives each a chance to fit under an even one
                   (its pick needs one while one is worth a compile: guide/likely.py)
    ranked below   it is not, and some have an even chance or more

A miss in the first state is the candidates' (no rule over the pool reaches the best); in the
third, the memory model's; in the last, the speed model's or the rule's. For the last, the
guide's figure for the near-best candidate it figures fastest, over its figure for the best
measured, says whether it saw them as no faster. For the first, how many knobs the candidate
nearest the best known still differs from it in says how far the gathering fell short. The
candidates' truths are measurements of the hidden IPU, never shown to the guide.

    python benchmarks/guide_misses.py --family regions --set develop --draws 2 --numerics advised
    python benchmarks/guide_misses.py --family knobs --set develop --draws 2
    python benchmarks/guide_misses.py --quick    # CI smoke: one region draw of ResNet-101
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import random_hidden
import search_efficiency as se
from common import markdown_table
from random_ipus import FAMILIES, add_draw_options

from ipu_autotune.guide.corrected import FIT_CONFIDENCE, CorrectedModel, observe
from ipu_autotune.guide.guide import EDGE_CONFIDENCE, Guide
from ipu_autotune.guide.proposal import History, Proposal
from ipu_autotune.problem import Config

#: the share of the best known a candidate must reach to count as near it
NEAR = 0.95
STATES = ("not gathered", "unlikely", "ranked below", "picked")


def knobs_apart(a: Config, b: Config) -> int:
    """How many of Config's fields differ between `a` and `b` (a list, such as the splits,
    counts as one)."""
    left, right = a.to_dict(), b.to_dict()
    return sum(left.get(k) != right.get(k) for k in left.keys() | right.keys())


def watching(
    oracle: Any, reference: float, best_known: Config | None, states: list[dict[str, Any]]
) -> type[Guide]:
    """A Guide that, after each proposal, puts it in one of STATES (appended to `states`)."""
    truths: dict[Config, float] = {}  # a candidate's throughput on the hidden IPU (0: no fit)

    def truth(problem: Any, config: Config) -> float:
        if config not in truths:
            m = oracle.evaluate(problem, config)
            truths[config] = m.throughput if m.feasible and m.throughput else 0.0
        return truths[config]

    class Watched(Guide):
        def propose(self, history: History, confidence: float = FIT_CONFIDENCE) -> Proposal | None:
            out = super().propose(history, confidence)
            measured = history.measured
            best = max(
                (m.throughput for _, m in measured if m.feasible and m.throughput), default=0.0
            )
            if not measured or best >= NEAR * reference:
                return out
            seen = observe(self.screen, measured)
            # the model the guide judged the candidates with (Guide._choose's)
            model = CorrectedModel(
                self.screen, seen, self.headroom, memory_factor=self.memory_factor(seen)
            )
            near = [
                c
                for c in self.pool
                if c not in history.asked and truth(self.problem, c) >= NEAR * reference
            ]
            likely = [c for c in near if model.chance(c) >= EDGE_CONFIDENCE]
            pick = out.config if out is not None else None
            state = (
                "not gathered"
                if not near
                else "picked"
                if pick in near
                else "unlikely"
                if not likely
                else "ranked below"
            )
            row: dict[str, Any] = {"compiles": len(measured), "state": state}
            if state == "not gathered" and best_known is not None:
                # how far the candidates got towards the best known, in knobs
                row["pool to best known"] = min(
                    (knobs_apart(c, best_known) for c in self.pool if c not in history.asked),
                    default=None,
                )
            if state == "ranked below":

                def figure(c: Config) -> float:
                    j = model.judge(c)
                    return j.throughput if j is not None else 0.0

                judged_best = max(
                    (figure(c) for c, m in measured if m.feasible and m.throughput), default=0.0
                )
                top = max(likely, key=figure)
                if judged_best > 0:
                    row["figure over best"] = figure(top) / judged_best
                    row["truth over best"] = truth(self.problem, top) / best
            states.append(row)
            return out

    return Watched


def run_draw(key: str, family: str, draw_id: int, budget: int) -> dict[str, Any]:
    common.quiet_optuna()
    problem = se.PROBLEMS[key]
    hidden = FAMILIES[family][0]
    reference, _, best_known = se.cached_best_known(
        problem, hidden(draw_id), draw_id, 30, 20, True
    )
    if reference is None:  # nothing fits this IPU: no best known to miss
        return {"problem": key, "draw": draw_id, "near": None, "states": []}
    states: list[dict[str, Any]] = []
    # the candidates' truths on an IPU of their own: the run's compile noise stays its own
    guide = watching(hidden(draw_id), reference, best_known, states)
    run = se.run_strategy(
        "ipu-autotune", problem, hidden(draw_id), draw_id, budget, 10 * budget, guide_type=guide
    )
    best = max((t or 0.0 for t in run.compiles), default=0.0)
    return {
        "problem": key,
        "draw": draw_id,
        "near": best >= NEAR * reference,
        "states": states,
    }


def report(results: list[dict[str, Any]], family: str, budget: int) -> str:
    out = [
        f"\n## {family}: the guide's proposals while nothing measured is within "
        f"{1 - NEAR:.0%} of the best known (budget {budget})\n"
    ]
    results = [r for r in results if r["near"] is not None]
    rows = [s for r in results for s in r["states"]]
    missed = [r for r in results if not r["near"]]
    table = []
    for state in STATES:
        count = sum(s["state"] == state for s in rows)
        runs = sum(any(s["state"] == state for s in r["states"]) for r in missed)
        table.append([state, str(count), f"{count / len(rows):.0%}" if rows else "-", str(runs)])
    out.append(
        markdown_table(
            ["state", "proposals", "share", f"of the {len(missed)} missed runs, with it"],
            table,
            "lrrr",
        )
    )
    below = [s for s in rows if "figure over best" in s]
    if below:
        figures = sorted(s["figure over best"] for s in below)
        truths = sorted(s["truth over best"] for s in below)
        out.append(
            f"\nranked below: the guide's figure for the near-best candidate it figured fastest, "
            f"over its figure for the best measured, median {figures[len(figures) // 2]:.2f} "
            f"(the truth {truths[len(truths) // 2]:.2f}), {len(below)} proposals"
        )
    apart = sorted(
        s["pool to best known"] for s in rows if s.get("pool to best known") is not None
    )
    if apart:
        out.append(
            "\nnone within 5 % among the candidates: the candidate nearest the best known "
            f"differs from it in a median {apart[len(apart) // 2]} knobs (range {apart[0]}-"
            f"{apart[-1]}), {len(apart)} proposals"
        )
    out.append(
        f"\nruns within {1 - NEAR:.0%} of the best known in {budget}: "
        f"{len(results) - len(missed)}/{len(results)}"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_draw_options(ap)
    ap.add_argument("--budget", type=int, default=10, help="compiles per run (default 10)")
    se.add_numerics_option(ap)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke: resnet101, one region develop draw whose best known is cached, 4 compiles",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.family, args.set, args.draws, args.first_draw = "regions", "develop", 1, 0
        args.problems, args.budget = ["resnet101-mb64-64px-2ipu"], 4
    se.NUMERICS = args.numerics
    common.header(
        "Where the guide misses the best known",
        "guide_misses.py",
        sys.argv[1:] if argv is None else argv,
    )
    ids = random_hidden.draw_ids(args.set, args.draws, args.first_draw, FAMILIES[args.family][1])
    keys = [k for k in se.PROBLEMS if k in args.problems]
    start, results = time.perf_counter(), []
    for key in keys:
        for draw in ids:
            results.append(run_draw(key, args.family, draw, args.budget))
            print(
                f"  {len(results)}/{len(keys) * len(ids)} done "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    print(report(results, args.family, args.budget))
    print(f"\nwall time: {time.perf_counter() - start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
