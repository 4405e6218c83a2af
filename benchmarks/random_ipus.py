"""The tuner on hidden IPUs drawn at random (random_hidden.py): a benchmark not tuned to.

Each run: one problem, one draw (a hidden IPU with its own mechanisms and strengths), the
tuner as `tune` runs it with a compiling backend (search_efficiency.run_strategy's
"ipu-autotune") against the tuner's TPE alone, each from the naive baseline, for `--budget`
compiles. Best known per (problem, draw): search_efficiency.cached_best_known on the draw
(climbs, a TPE run and kicks on the hidden IPU itself), raised by anything a run measured.

`--family structural` (the default) draws random_hidden.RandomHiddenIPU; `--family knobs` draws
knob_hidden.KnobResponseHiddenIPU (issue 41) and `--family regions` region_hidden.RegionHiddenIPU
(issue 58), each family with its own id sets; those two run Optuna's GPSampler too (`gp`). Draws
come from two disjoint sets per family (random_hidden.DRAW_SETS, knob_hidden.DRAW_SETS,
region_hidden.DRAW_SETS): `--set develop` (the default) to develop on, `--set report` to report on,
after development only. The two hand-made hidden IPUs stay in search_efficiency.py
(`--hidden constants structural`) as named cases.

    python benchmarks/random_ipus.py --set report          # 5 problems x 20 draws, budget 20
    python benchmarks/random_ipus.py --set develop --draws 6 --problems bert-base-sl128-mb8-4ipu
    python benchmarks/random_ipus.py --set report --first-draw 20   # report draws 20020-20039
    python benchmarks/random_ipus.py --quick               # CI smoke: 1 problem, 2 develop draws
    python benchmarks/random_ipus.py --family knobs --set develop --draws 3   # issue 41, with gp
    python benchmarks/random_ipus.py --family regions --set develop --draws 3 # issue 58, with gp
    python benchmarks/random_ipus.py --compare before.json after.json  # two --json runs, paired
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import knob_hidden
import random_hidden
import region_hidden
import search_efficiency as se
from common import fmt_count, markdown_table, median, quantile
from guide_outcomes import chance_table, paired
from knob_hidden import KnobResponseHiddenIPU
from random_hidden import MECHANISMS, RandomHiddenIPU
from region_hidden import RegionHiddenIPU

STRATEGIES = ("ipu-autotune", "tpe", "gp")
NEAR_WITHIN = 10  # "within 5% of the best known in <= 10 compiles"
#: hidden-IPU families: the draws' class and their develop and report id sets. structural:
#: mechanisms drawn per IPU (issue 22); knobs: every knob's own response on top (issue 41);
#: regions: random regions of the space off in speed and memory on top (issue 58)
FAMILIES = {
    "structural": (RandomHiddenIPU, random_hidden.DRAW_SETS),
    "knobs": (KnobResponseHiddenIPU, knob_hidden.DRAW_SETS),
    "regions": (RegionHiddenIPU, region_hidden.DRAW_SETS),
}


def add_draw_options(ap: argparse.ArgumentParser) -> None:
    """The options of a script that runs the problems on draws of one family: --family
    (default regions), --set, --draws, --first-draw and --problems."""
    ap.add_argument("--family", choices=sorted(FAMILIES), default="regions")
    ap.add_argument("--set", choices=("develop", "report"), default="develop")
    ap.add_argument("--draws", type=int, default=2, help="draws per problem (default 2)")
    ap.add_argument("--first-draw", type=int, default=0)
    ap.add_argument(
        "--problems", nargs="+", choices=sorted(se.PROBLEMS), default=sorted(se.PROBLEMS)
    )


#: per family, the issue's must-show 1 per problem on the report draws: the share within 5%
#: in <= 10 compiles, the median compiles to 5%, the median first fit and best@10 (None: not
#: a target) and the stopping rule's precision
TARGETS = {
    "structural": {
        "issue": 22,
        "within": 0.9,
        "median": 4,
        "first fit": 2,
        "best@10": 0.95,
        "stop": None,
    },
    "knobs": {
        "issue": 41,
        "within": 0.9,
        "median": 3,
        "first fit": None,
        "best@10": None,
        "stop": 0.9,
    },
    "regions": {
        "issue": 58,
        "within": 0.9,
        "median": 3,
        "first fit": None,
        "best@10": None,
        "stop": 0.9,
    },
}
DEFAULT_STRATEGIES = {
    "structural": ("ipu-autotune", "tpe"),
    "knobs": STRATEGIES,
    "regions": STRATEGIES,
}


def run_draw(args: tuple[Any, ...]) -> dict[str, Any]:
    """One (problem, draw): the best-known search, then each strategy. Picklable for a pool."""
    key, draw_id, budget, reference_trials, kicks, use_cache, strategies, family = args[:8]
    common.quiet_optuna()
    # a spawned worker starts from the module's defaults
    se.NUMERICS, se.SAMPLER_STARTUP = args[8:]
    problem = se.PROBLEMS[key]
    oracle = FAMILIES[family][0](draw_id)
    t0 = time.perf_counter()
    reference, source, _ = se.cached_best_known(
        problem, oracle, draw_id, reference_trials, kicks, use_cache
    )
    ref_seconds = time.perf_counter() - t0
    runs = {
        s: se.run_strategy(s, problem, oracle, draw_id, budget, 10 * budget) for s in strategies
    }
    seen = [t for r in runs.values() for t in r.compiles if t is not None]
    if seen and (reference is None or max(seen) > reference):
        reference, source = max(seen), "a benchmarked run"
    return {
        "problem": key,
        "draw": draw_id,
        "mechanisms": oracle.draw.strengths,
        "reference": reference,
        "reference_source": source,
        "reference_seconds": ref_seconds,
        "runs": {
            s: {k: v for k, v in r.__dict__.items() if k != "best_config"} for s, r in runs.items()
        },
    }


def joined(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Results of several runs (strategies run apart) as one per (problem, draw): the union
    of their strategies, the best known raised by anything any of them measured."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for results in runs:
        for r in results:
            key = (r["problem"], r["draw"])
            if key not in out:
                out[key] = {**r, "runs": dict(r["runs"])}
                continue
            into = out[key]
            into["runs"].update(r["runs"])
            into["reference_seconds"] = max(
                into.get("reference_seconds", 0.0), r.get("reference_seconds", 0.0)
            )
            if r["reference"] is not None and (
                into["reference"] is None or r["reference"] > into["reference"]
            ):
                into["reference"], into["reference_source"] = r["reference"], r["reference_source"]
    order = list(se.PROBLEMS)
    return sorted(
        out.values(),
        key=lambda r: (
            order.index(r["problem"]) if r["problem"] in order else len(order),
            r["problem"],
            r["draw"],
        ),
    )


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({n / d:.0%})" if d else "-"


def report(
    results: list[dict[str, Any]], budget: int, keys: list[str], family: str = "structural"
) -> str:
    out = ["## Problems and draws\n"]
    rows = []
    for key in keys:
        rs = [r for r in results if r["problem"] == key]
        fit = [r for r in rs if r["reference"]]
        rows.append(
            [
                key,
                str(len(rs)),
                f"{len(fit)}/{len(rs)}",
                f"{median([len(r['mechanisms']) for r in rs]):.0f}",
                f"{sum(r['reference_seconds'] for r in rs):.0f}",
            ]
        )
    out.append(
        markdown_table(
            [
                "problem",
                "draws",
                "draws with a fit (runs counted)",
                "mechanisms (median)",
                "best-known search s",
            ],
            rows,
            "lrrrr",
        )
    )
    rows, checks = [], []
    groups = [(k, [r for r in results if r["problem"] == k and r["reference"]]) for k in keys]
    groups.append(("all problems", [r for r in results if r["reference"]]))
    for key, rs in groups:
        for s in [s for s in STRATEGIES if all(s in r["runs"] for r in rs)]:
            ms = [se.metrics(r["runs"][s], r["reference"], budget) for r in rs]
            if not ms:
                continue
            near = [m["near"] for m in ms]
            within = sum(v <= NEAR_WITHIN for v in near)
            first, at10 = median([m["first"] for m in ms]), median([m["at"][10] for m in ms])
            rows.append(
                [
                    key,
                    s,
                    _pct(within, len(ms)),
                    fmt_count(median(near), budget),
                    fmt_count(quantile(near, 0.9), budget),
                    fmt_count(first, budget),
                    f"{at10:.2f}",
                    f"{median([m['at'][20] for m in ms]):.2f}" if budget >= 20 else "-",
                ]
            )
            if s == "ipu-autotune" and key != "all problems":
                checks.append([key, *_checks(TARGETS[family], ms)])
    out.append(
        f"\n## Compiles (budget {budget}; runs on draws with a fit; >{budget}: not within the "
        "budget)\n"
    )
    out.append(
        markdown_table(
            [
                "problem",
                "strategy",
                f"within 5% in <= {NEAR_WITHIN}",
                "median to 5%",
                "p90 to 5%",
                "median first fit",
                "best@10 (median)",
                "best@20 (median)",
            ],
            rows,
            "llrrrrrr",
        )
    )
    names = _target_names(TARGETS[family])
    out.append(
        f"\n## Targets (issue {TARGETS[family]['issue']}, must show 1, on the report draws): "
        f"{', '.join(names)}\n"
    )
    out.append(markdown_table(["problem", *names], checks, "l" * (len(names) + 1)))
    if not all("ipu-autotune" in r["runs"] for _, rs in groups for r in rs):
        return "\n".join(out)
    rows = []
    for key, rs in groups:
        ms = [se.metrics(r["runs"]["ipu-autotune"], r["reference"], budget) for r in rs]
        fired, right = _stops(ms)
        rows.append(
            [
                key,
                f"{len(fired)}/{len(ms)}",
                fmt_count(median([m["stop_at"] for m in fired]), budget) if fired else "-",
                _pct(right, len(fired)),
                f"{median([m['stop_fraction'] for m in fired]):.2f}" if fired else "-",
            ]
        )
    out.append(
        "\n## Stopping rule (ipu-autotune): of the runs where it said stop, how many were within "
        "5% then\n"
    )
    out.append(
        markdown_table(
            [
                "problem",
                "runs where it said stop",
                "median compile when it did",
                "within 5% then (stop precision)",
                "best then / best known (median)",
            ],
            rows,
            "lrrrr",
        )
    )
    chances = chance_table(results)
    if chances is not None:
        out.append(
            "\n## The chance to fit of what the guide compiled (ipu-autotune, every problem)\n"
        )
        out.append(chances)
    return "\n".join(out)


def _stops(ms: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The runs where the stopping rule fired, and how many of them were within 5% then."""
    fired = [m for m in ms if not math.isinf(m["stop_at"])]
    return fired, sum(m["near"] <= m["stop_at"] for m in fired)


def _target_names(t: dict[str, Any]) -> list[str]:
    names = [f">= {t['within']:.0%} in <= {NEAR_WITHIN}", f"median <= {t['median']}"]
    names += [f"first fit <= {t['first fit']}"] if t["first fit"] is not None else []
    names += [f"best@10 >= {t['best@10']}"] if t["best@10"] is not None else []
    return names + ([f"stop right >= {t['stop']:.0%}"] if t["stop"] is not None else [])


def _checks(t: dict[str, Any], ms: list[dict[str, Any]]) -> list[str]:
    """'met' or 'not met' per target of `t` (_target_names' order) for one problem's runs."""
    near = [m["near"] for m in ms]
    met = [
        sum(v <= NEAR_WITHIN for v in near) / len(ms) >= t["within"],
        median(near) <= t["median"],
    ]
    if t["first fit"] is not None:
        met.append(median([m["first"] for m in ms]) <= t["first fit"])
    if t["best@10"] is not None:
        met.append(median([m["at"][10] for m in ms]) >= t["best@10"])
    cells = ["met" if ok else "not met" for ok in met]
    if t["stop"] is not None:
        fired, right = _stops(ms)
        cells.append(
            "- (never said stop)"
            if not fired
            else "met"
            if right / len(fired) >= t["stop"]
            else "not met"
        )
    return cells


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        default="structural",
        help="hidden IPUs to draw: structural (issue 22's mechanisms), knobs (every knob's own "
        "response on top, issue 41) or regions (random regions of the space off on top, issue 58)",
    )
    ap.add_argument(
        "--set",
        choices=("develop", "report"),
        default="develop",
        help="draw ids to run: develop (develop the guide on these) or report (report only)",
    )
    ap.add_argument(
        "--draws", type=int, default=None, help="draws per problem (default 20; quick 2)"
    )
    ap.add_argument(
        "--first-draw",
        type=int,
        default=0,
        help="skip this many draws of the set: a fresh report set after the first is seen, or a "
        "split run",
    )
    ap.add_argument(
        "--budget", type=int, default=None, help="compiles per run (default 20; quick 10)"
    )
    ap.add_argument(
        "--problems",
        nargs="+",
        choices=sorted(se.PROBLEMS),
        default=None,
        metavar="PROBLEM",
        help=f"any of: {', '.join(se.PROBLEMS)} (default all; quick {se.QUICK_PROBLEMS[0]})",
    )
    ap.add_argument(
        "--reference-trials",
        type=int,
        default=None,
        help="TPE trials on the hidden IPU behind 'best known' (default 60; quick 10)",
    )
    ap.add_argument(
        "--kicks",
        type=int,
        default=None,
        help="kicks of the best-known search (default 50; quick 5)",
    )
    ap.add_argument(
        "--strategies",
        nargs="+",
        choices=STRATEGIES,
        default=None,
        help="strategies to run (default: ipu-autotune and tpe; with --family knobs or regions "
        "gp too, Optuna's GPSampler with the out-of-memory constraint; the tuner alone "
        "while developing)",
    )
    ap.add_argument(
        "--processes", type=int, default=1, help="benchmark worker processes (default 1)"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke: 1 problem, 2 draws, budget 10, short reference",
    )
    ap.add_argument(
        "--no-reference-cache", action="store_true", help="search the best known afresh"
    )
    se.add_numerics_option(ap)
    ap.add_argument(
        "--startup-trials",
        type=int,
        default=se.SAMPLER_STARTUP,
        metavar="N",
        help="random trials TPE and GPSampler draw before they model any (default "
        f"{se.SAMPLER_STARTUP}, Optuna's: with budget 10 both are then random search)",
    )
    ap.add_argument(
        "--json", type=Path, default=None, help="also write every run's raw results here"
    )
    ap.add_argument(
        "--report",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="print the tables of earlier runs' --json files (runs done so far), running nothing; "
        "several files (the strategies run apart) are joined per (problem, draw)",
    )
    ap.add_argument(
        "--compare",
        type=Path,
        nargs=2,
        default=None,
        metavar=("A", "B"),
        help="the tuner in two earlier runs' --json files (two versions of the guide, say) on "
        "the (problem, draw) pairs both ran: best@10, B's wins and losses, a sign test; "
        "running nothing",
    )
    args = ap.parse_args(argv)
    if args.startup_trials < 1:
        ap.error(f"--startup-trials must be at least 1, got {args.startup_trials}")
    if args.compare:
        try:
            a, b = (json.loads(path.read_text()) for path in args.compare)
            table = paired(a["results"], b["results"])
        except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
            print(
                "error: --compare reads two files written by random_ipus.py --json "
                f"({type(e).__name__}: {e})",
                file=sys.stderr,
            )
            return 2
        except ValueError as e:
            print(
                f"error: {e}; run both with --json on the same --family, --set and draws",
                file=sys.stderr,
            )
            return 2
        print(
            f"A: {args.compare[0]} ({' '.join(a.get('argv', []))})\nB: {args.compare[1]} "
            f"({' '.join(b.get('argv', []))})\n"
        )
        print("## The tuner in A against B (wins: B's best@10 higher by more than 0.01)\n")
        print(table)
        return 0
    if args.report:
        reports = [json.loads(path.read_text()) for path in args.report]
        families = {s.get("family", "structural") for s in reports}
        if len(families) > 1:
            print(
                "error: the --report files hold different families "
                f"({', '.join(sorted(families))}); report each family apart",
                file=sys.stderr,
            )
            return 2
        results = joined([s["results"] for s in reports])
        everyone = set().union(*(r["runs"] for r in results))
        partial = [r for r in results if set(r["runs"]) != everyone]
        if partial:  # a run stopped early: report the (problem, draw) pairs every strategy ran on
            print(
                f"left out: {len(partial)} (problem, draw) pair(s) not run by every strategy "
                f"({', '.join(sorted(everyone))})"
            )
            results = [r for r in results if set(r["runs"]) == everyone]
        keys = list(dict.fromkeys(r["problem"] for r in results))
        for path, s in zip(args.report, reports, strict=True):
            print(
                f"tables of {path} (family {s.get('family', 'structural')}, draw set {s['set']}; "
                f"command: python benchmarks/random_ipus.py {' '.join(s['argv'])}; "
                f"{len(s['results'])} runs)"
            )
        print()
        print(report(results, reports[0].get("budget", 20), keys, families.pop()))
        return 0
    draws = args.draws or (2 if args.quick else 20)
    budget = args.budget or (10 if args.quick else 20)
    keys = args.problems or (se.QUICK_PROBLEMS if args.quick else list(se.PROBLEMS))
    trials = args.reference_trials or (10 if args.quick else 60)
    kicks = args.kicks or (5 if args.quick else 50)
    common.quiet_optuna()
    common.header("Search efficiency on random hidden IPUs", "random_ipus.py", argv)
    ids = random_hidden.draw_ids(args.set, draws, args.first_draw, FAMILIES[args.family][1])
    strategies = tuple(args.strategies or DEFAULT_STRATEGIES[args.family])
    layer = {
        "knobs": " and every knob's own response (knob_hidden.py)",
        "regions": " and random regions of the space off in speed and memory (region_hidden.py)",
    }.get(args.family, "")
    use = "develop on these" if args.set == "develop" else "held out: report only, never tuned on"
    print(
        f"draw set: {args.set} (ids {ids[0]}-{ids[-1]}; {use}); "
        f"family: {args.family}; {len(keys)} problem(s) x {draws} draw(s); budget {budget} "
        f"compiles; best known from climbs, a {trials}-trial TPE run and {kicks} kicks on each "
        f"hidden IPU; numerics {args.numerics}; TPE and GPSampler start with "
        f"{args.startup_trials} random trials; mechanisms: {', '.join(MECHANISMS)}{layer}\n",
        flush=True,
    )
    start = time.perf_counter()
    jobs = [
        (
            k,
            d,
            budget,
            trials,
            kicks,
            not args.no_reference_cache,
            strategies,
            args.family,
            args.numerics,
            args.startup_trials,
        )
        for k in keys
        for d in ids
    ]
    results = []

    def saved() -> dict[str, Any]:  # what --json keeps and --report reads
        return {
            "argv": argv,
            "family": args.family,
            "set": args.set,
            "budget": budget,
            "results": results,
        }

    with contextlib.ExitStack() as stack:
        done: Iterator[dict[str, Any]]
        if args.processes > 1:
            pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(args.processes))
            done = pool.imap_unordered(run_draw, jobs)
        else:
            done = map(run_draw, jobs)
        for result in done:
            results.append(result)
            if (
                args.json
            ):  # kept after each run: a long run stopped early still reports what it did
                args.json.write_text(json.dumps(saved(), default=str))
            print(
                f"  {len(results)}/{len(jobs)} done ({time.perf_counter() - start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    results.sort(key=lambda r: (keys.index(r["problem"]), r["draw"]))
    print(report(results, budget, keys, args.family))
    print(f"\nwall time: {time.perf_counter() - start:.0f} s with {args.processes} process(es)")
    if args.json:
        args.json.write_text(json.dumps(saved(), indent=1, default=str))
        print(f"raw results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
