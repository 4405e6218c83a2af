"""Is the guide's chance to fit calibrated? (issue 22: of candidates given 0.8, about 80 % fit)

Per (problem, random hidden IPU, random_hidden.py): the first COMPILES configs the tuner
compiles (the baseline and the warm starts of `warmstart.proposals`, in order) are measured
on the hidden IPU; the guide's corrected model (guide/corrected.py: the learnt memory parts of
guide/memory_model.py and the residuals near each compile) learns from them; then every candidate
the guide would judge next (the warm starts and their single-knob changes, every IPU layout,
not compiled) gets a chance to fit, which is compared with whether it fits on the hidden IPU.
The guide's judgement before (the estimate times the learnt ratio, no
margin) is scored on the same candidates. Nothing here counts compiles or changes the tuner.

    python benchmarks/memory_calibration.py                  # develop draws, 5 problems x 20
    python benchmarks/memory_calibration.py --set report     # held-out draws: report only
    python benchmarks/memory_calibration.py --quick          # CI smoke: 1 problem, 2 draws
    python benchmarks/memory_calibration.py --family knobs --set report --first-draw 100 --draws 4
                                                             # every knob's own response (issue 41)
    python benchmarks/memory_calibration.py --family regions --draws 4
                                                             # random regions off (issue 58)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import knob_hidden
import random_hidden
import region_hidden
import search_efficiency as se
from common import markdown_table
from knob_hidden import KnobResponseHiddenIPU
from random_hidden import RandomHiddenIPU, draw_ids
from region_hidden import RegionHiddenIPU

from ipu_autotune.guide.corrected import CorrectedModel, observe
from ipu_autotune.guide.warmstart import Screen, naive_baseline, proposals
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace

#: compiles learnt from before the candidates are judged: the first three warm starts of
#: `warmstart.proposals`, in order. `tune` compiles fewer of them (the baseline alone,
#: COMPILED_WARM_STARTS, then the guide's choices); three fixed ones keep the draws comparable.
COMPILES = 3
#: hidden-IPU families, as benchmarks/random_ipus.py names them: the draws' class and id sets
FAMILIES = {
    "structural": (RandomHiddenIPU, random_hidden.DRAW_SETS),
    "knobs": (KnobResponseHiddenIPU, knob_hidden.DRAW_SETS),
    "regions": (RegionHiddenIPU, region_hidden.DRAW_SETS),
}
BINS = [(i / 10, (i + 1) / 10) for i in range(10)]


def judge_draw(
    key: str, draw_id: int, family: str = "structural"
) -> list[tuple[float, bool, bool]]:
    """(the guide's chance to fit, the ratio it used before says it fits, it fits on the hidden
    IPU) per candidate."""
    problem = se.PROBLEMS[key]
    profile, space = profile_for(problem), SearchSpace.load(problem)
    oracle = FAMILIES[family][0](draw_id)
    items = [
        p.config
        for p in proposals(
            problem, profile, space, naive_baseline(problem, profile), headroom=0.05
        )
    ]
    screen = Screen(problem, profile, space=space)
    measured = [
        (c, oracle.evaluate(problem, c)) for c in items[:COMPILES] if screen(c) is not None
    ]
    # the guide's own judgement: the learnt memory parts plus the residuals near each compile
    model = CorrectedModel(screen, observe(screen, measured), 0.0)
    ratio = _RatioModel(screen, measured)
    compiled = {c for c, _ in measured}
    candidates = dict.fromkeys(
        c for item in items for c in [item, *(x for _, x in screen.candidates(space, item))]
    )
    out = []
    for c in candidates:
        estimate = screen(c)
        if c in compiled or estimate is None or (j := model.judge(c)) is None:
            continue
        out.append((j.chance, ratio.fits(c, estimate), oracle.evaluate(problem, c).feasible))
    return out


class _RatioModel:
    """A ratio rule to score against the learnt model: the estimate times the measured/estimated
    busiest-tile ratio of the compiles, kernel-blended per config (no margin). It was the
    guide's rule before its learnt memory model."""

    def __init__(self, screen: Any, measured: Any) -> None:
        self.points = []
        for config, m in measured:
            if m.source == "estimate" or m.failure not in (None, "oom"):
                continue
            want = screen(config).max_tile_bytes
            ratios = [got / w for got, w in zip(m.max_tile_bytes, want, strict=True) if w > 0]
            if ratios:
                self.points.append((config, max(ratios)))
        self.prior = (
            math.exp(sum(math.log(r) for _, r in self.points) / len(self.points))
            if self.points
            else 1.0
        )

    def fits(self, config: Any, estimate: Any) -> bool:
        # the compiles' ratios blended by 0.3 ** (knobs apart), their mean ratio counting as a
        # quarter of a compile
        weights = [
            (
                0.3
                ** sum(getattr(config, f) != getattr(c, f) for f in config.__dataclass_fields__),
                r,
            )
            for c, r in self.points
        ]
        ratio = (0.25 * self.prior + sum(w * r for w, r in weights)) / (
            0.25 + sum(w for w, _ in weights)
        )
        fits: bool = max(estimate.max_tile_bytes) * ratio <= estimate.tile_capacity_bytes
        return fits


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        default="structural",
        help="hidden IPUs: structural mechanisms (issue 22), every knob's own response (issue "
        "41) or random regions of the space off (issue 58)",
    )
    ap.add_argument(
        "--set",
        choices=("develop", "report"),
        default="develop",
        help="draw ids: develop (develop on these) or report (held out, report only)",
    )
    ap.add_argument(
        "--draws", type=int, default=None, help="draws per problem (default 20; quick 2)"
    )
    ap.add_argument(
        "--first-draw",
        type=int,
        default=0,
        help="skip this many draws of the set (a fresh report set after the first is seen)",
    )
    ap.add_argument(
        "--problems",
        nargs="+",
        choices=sorted(se.PROBLEMS),
        default=None,
        metavar="PROBLEM",
        help=f"any of: {', '.join(se.PROBLEMS)} (default all; quick {se.QUICK_PROBLEMS[0]})",
    )
    ap.add_argument("--quick", action="store_true", help="CI smoke: 1 problem, 2 draws")
    args = ap.parse_args(argv)
    draws = args.draws or (2 if args.quick else 20)
    keys = args.problems or (se.QUICK_PROBLEMS if args.quick else list(se.PROBLEMS))
    common.quiet_optuna()
    common.header(
        "Chance to fit: the learnt memory model against the hidden IPU",
        "memory_calibration.py",
        argv,
    )
    ids = draw_ids(args.set, draws, args.first_draw, FAMILIES[args.family][1])
    print(
        f"family: {args.family}; draw set: {args.set} (ids {ids[0]}-{ids[-1]}); {len(keys)} "
        f"problem(s) x {draws} draw(s); learnt from the first {COMPILES} compiles of each run\n",
        flush=True,
    )
    start = time.perf_counter()
    per = {k: [x for d in ids for x in judge_draw(k, d, args.family)] for k in keys}
    every = [x for k in keys for x in per[k]]
    rows = []
    for lo, hi in BINS:
        got = [(p, fit) for p, _, fit in every if lo <= p < hi or (hi == 1.0 and p == 1.0)]
        if got:
            rows.append(
                [
                    f"{lo:.1f}-{hi:.1f}",
                    str(len(got)),
                    f"{sum(p for p, _ in got) / len(got):.2f}",
                    f"{sum(f for _, f in got) / len(got):.2f}",
                ]
            )
    print("## Calibration (every problem: candidates binned by the learnt chance to fit)\n")
    print(
        markdown_table(["chance to fit", "candidates", "mean chance", "observed fit rate"], rows)
    )
    rows = []
    for k in [*keys, "all problems"]:
        xs = every if k == "all problems" else per[k]
        if not xs:
            continue
        fits = sum(f for _, _, f in xs)
        brier = sum((p - f) ** 2 for p, _, f in xs) / len(xs)

        def rates(says: Any) -> str:
            yes = [f for s, f in says if s]
            no = [f for s, f in says if not s]
            return (
                (f"{sum(yes) / len(yes):.2f} of {len(yes)}" if yes else "-")
                + " / "
                + (f"{sum(no)} of {len(no)}" if no else "-")
            )

        rows.append(
            [
                k,
                str(len(xs)),
                f"{fits / len(xs):.2f}",
                f"{brier:.3f}",
                rates([(p >= 0.5, f) for p, _, f in xs]),
                rates([(s, f) for _, s, f in xs]),
            ]
        )
    print(
        "\n## Says it fits: of the candidates it says fit, the fraction that fit / of those it "
        "rules out, how many fit\n"
    )
    print(
        markdown_table(
            [
                "problem",
                "candidates",
                "fit on the hidden IPU",
                "Brier (learnt chance)",
                "learnt, chance >= 0.5",
                "the guide before (learnt ratio, no margin)",
            ],
            rows,
            "lrrrrr",
        )
    )
    print(f"\nwall time: {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
