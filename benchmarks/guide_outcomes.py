"""What the guide's compiles came to, read from random_ipus.py's saved runs: how its chance to
fit held for what it compiled, and whether one version of it beat another on the same draws.

Both answer questions the per-problem medians hide. A chance to fit judged over candidates
(memory_calibration.py) is not the chance of what the guide picks: the rule picks where the
model is most hopeful, so its picks fit less often than the candidates' table says. And on
15 runs the medians move by a few hundredths from one harmless change to the next: a change
to the guide is worth keeping when it wins on more of the same (problem, draw) pairs than it
loses, and by more than chance would give (a sign test).
"""

from __future__ import annotations

import math
from statistics import fmean
from typing import Any

from common import markdown_table

GUIDE = "ipu-autotune"
#: the chance-to-fit bins of the guide's compiles (the top two are where it says "fits")
CHANCE_BINS = ((0.0, 0.5), (0.5, 0.8), (0.8, 0.9), (0.9, 1.0))
#: two runs whose best@k differ by no more than this are a tie (the compile-to-compile jitter)
TIE = 0.01


def _bin(chance: float) -> tuple[float, float]:
    return next(b for b in CHANCE_BINS if b[0] <= chance < b[1] or (b[1] == 1.0 and chance == 1.0))


def chance_table(results: list[dict[str, Any]]) -> str | None:
    """The guide's compiles binned by the chance to fit it gave each, against how many fit;
    None when the runs carry no chances (saved before they were kept)."""
    picks: dict[tuple[float, float], list[tuple[float, bool]]] = {b: [] for b in CHANCE_BINS}
    compiles = out_of_memory = 0
    for r in results:
        run = r["runs"].get(GUIDE)
        if not run or not run.get("chances"):
            continue
        for chance, throughput in zip(run["chances"], run["compiles"], strict=True):
            compiles += 1
            out_of_memory += throughput is None
            if chance is not None:
                picks[_bin(chance)].append((chance, throughput is not None))
    if not compiles:
        return None
    rows = [
        [
            f"{lo:.1f}-{hi:.1f}",
            str(len(p)),
            f"{fmean(c for c, _ in p):.2f}" if p else "-",
            f"{sum(f for _, f in p) / len(p):.2f}" if p else "-",
        ]
        for (lo, hi), p in picks.items()
    ]
    return (
        f"{out_of_memory} of {compiles} compiles did not fit ({out_of_memory / compiles:.0%}). "
        "The guide's own picks, binned by the chance to fit it gave them:\n\n"
        + markdown_table(["chance to fit", "compiles", "mean chance", "fit"], rows, "lrrr")
    )


def best_at(run: dict[str, Any], reference: float, k: int) -> float:
    """The best of the first k compiles as a fraction of the reference."""
    return max((t for t in run["compiles"][:k] if t is not None), default=0.0) / reference


def sign_test(wins: int, losses: int) -> float:
    """Two-sided sign test: the chance of a split at least this uneven if neither side were
    better."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]], k: int = 10) -> str:
    """The guide in `a` and in `b` on the (problem, draw) pairs both ran: best@k of each against
    the same best known (the larger of the two files'), wins, losses and ties of `b`, the
    sign test, and the share of compiles that did not fit."""
    first = {(r["problem"], r["draw"]): r for r in a if GUIDE in r["runs"]}
    pairs = [
        (first[key], r)
        for r in b
        if GUIDE in r["runs"] and (key := (r["problem"], r["draw"])) in first
    ]
    pairs = [(x, y) for x, y in pairs if x["reference"] and y["reference"]]
    if not pairs:
        raise ValueError(
            f"the two files share no (problem, draw) pair with a '{GUIDE}' run and a best known"
        )
    groups = [
        (p, [(x, y) for x, y in pairs if x["problem"] == p])
        for p in dict.fromkeys(x["problem"] for x, _ in pairs)
    ]
    rows = []
    for name, group in [*groups, ("all problems", pairs)]:
        scores = []
        for x, y in group:
            reference = max(x["reference"], y["reference"])
            scores.append(
                (best_at(x["runs"][GUIDE], reference, k), best_at(y["runs"][GUIDE], reference, k))
            )
        wins = sum(sb - sa > TIE for sa, sb in scores)
        losses = sum(sa - sb > TIE for sa, sb in scores)
        rows.append(
            [
                name,
                str(len(group)),
                f"{fmean(s for s, _ in scores):.3f}",
                f"{fmean(s for _, s in scores):.3f}",
                f"{wins} / {losses} / {len(group) - wins - losses}",
                f"{sign_test(wins, losses):.2f}",
                f"{_no_fit(x for x, _ in group):.0%}",
                f"{_no_fit(y for _, y in group):.0%}",
            ]
        )
    return markdown_table(
        [
            "problem",
            "pairs",
            f"A best@{k} (mean)",
            f"B best@{k} (mean)",
            "B wins / loses / ties",
            "sign test p",
            "A did not fit",
            "B did not fit",
        ],
        rows,
        "lrrrrrrr",
    )


def _no_fit(results: Any) -> float:
    compiles = [t for r in results for t in r["runs"][GUIDE]["compiles"]]
    return sum(t is None for t in compiles) / len(compiles) if compiles else math.nan
