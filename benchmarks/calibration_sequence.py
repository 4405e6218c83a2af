"""Studies in sequence on one random hidden IPU, with and without the calibration store (issue 25).

Per draw (benchmarks/random_hidden.py, a hidden IPU with its own structural differences; with
`--family knobs`, knob_hidden.py's draws, every knob's own response on top, issue 41):
the problems in turn, each tuned as `ipu-autotune tune` runs with a compiling backend
(serially: warm starts, then the guide, screening at 25 %), in two arms:

  cold   as without the store: the baseline compiles first (COMPILED_WARM_STARTS), then the
         guide, from the nominal estimator
  warm   as tune runs with the store: the guide's prior from the records this arm's earlier
         studies wrote (calibration/session.py, recorder.py, to a journal store in a
         temporary folder); the guide's own first choice (guide/first_trials.py), then the
         baseline (not compiled when the prior gives it under session.VETO_CHANCE to fit:
         session.prior_veto), then the guide

The first problem of a draw has an empty store: every arm runs the same study there, and it
is left out of the figures. Reported per arm, over the 2nd..last problem of every draw: the
share of studies whose first compile fits, how many get within 5 % of the best known in the
budget, the median compiles to within 5 % (a study that never gets there counts as budget +
1), and the mean best of the budget as a fraction of the best known. The best known: with
--reference-trials, search_efficiency.py's best-known search (the same search and cache as
random_ipus.py: about 100 s per problem and draw when not cached), raised by anything an arm
found; without, the best any arm found. Then the leave-one-study-out error of the corrected
estimator against the nominal one on the warm arm's records of each draw
(calibration/prior.loso).

    python benchmarks/calibration_sequence.py --draws 3 --problems 3 --budget 12    # a few minutes
    python benchmarks/calibration_sequence.py --set report --draws 20 --problems 5 --budget 12 \
        --reference-trials 30 --kicks 20                                              # the report
    python benchmarks/calibration_sequence.py --family knobs --draws 3 --problems 3
                                                                    # issue 41's family
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import search_efficiency as se
from common import DEFAULT_HEADROOM, DEFAULT_SCREEN_MARGIN
from random_hidden import draw_ids
from random_ipus import FAMILIES
from search_efficiency import PROBLEMS

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.backends.screen import ScreenedBackend
from ipu_autotune.calibration import session
from ipu_autotune.calibration.prior import loso
from ipu_autotune.calibration.store import open_store
from ipu_autotune.guide.first_trials import first_trials
from ipu_autotune.guide.guide import COMPILED_WARM_STARTS, Guide, GuideSettings
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study import records as st
from ipu_autotune.study.runner import Runner
from ipu_autotune.study.storage import open_storage

NEAR = 0.95
#: the arms: cold (no store), warm (a store this arm's earlier studies filled)
ARMS = ("cold", "warm")


def one_study(problem: Any, oracle: Any, budget: int, store: Any, name: str) -> list[Any]:
    """One study as tune runs it (commands/tune.py); returns each compile's throughput (None:
    did not fit)."""
    runner, _ = start_study(problem, oracle, store, name)
    return run_compiles(runner, oracle, budget)


def start_study(problem: Any, oracle: Any, store: Any, name: str) -> tuple[Runner, Guide]:
    """A study as tune opens it (commands/tune.py), with the store's prior and recorder when
    `store` is given; nothing compiled yet."""
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    baseline = naive_baseline(problem, profile)
    items = proposals(problem, profile, space, baseline, headroom=DEFAULT_HEADROOM)
    calibrated = (
        session.give_prior(store, name, problem, oracle, print) if store is not None else None
    )
    guide = Guide(
        problem,
        profile,
        space,
        GuideSettings(
            DEFAULT_HEADROOM,
            candidates=[p.config for p in items],
            prior=calibrated.prior if calibrated is not None else None,
        ),
    )
    backend = ScreenedBackend(
        oracle,
        EstimateBackend(headroom=DEFAULT_HEADROOM),
        margin=DEFAULT_SCREEN_MARGIN,
        veto=session.prior_veto(guide, baseline),
    )  # as tune makes it

    def on_create(s: Any) -> None:
        s.set_user_attr(session.ATTR_UID, name)
        first = first_trials(
            guide, items[:COMPILED_WARM_STARTS], lambda c: backend.would_compile(problem, c)
        )  # as tune
        st.enqueue(s, space, problem, profile, first)

    study, _ = st.open_study(open_storage("memory:"), name, problem, 0, on_create)
    runner = Runner(study, problem, profile, space, backend, guide=guide)
    if (
        calibrated is not None
        and session.attach(calibrated, study, problem, profile, backend, print) is not None
    ):
        runner.observers.append(calibrated.recorder)
    return runner, guide


def run_compiles(runner: Runner, oracle: Any, budget: int) -> list[Any]:
    """`budget` more compiles of `runner`'s study; each one's throughput (None: did not fit)."""
    compiles, first = [], oracle.compiles
    trials = 0
    while oracle.compiles - first < budget and trials < 3 * budget:
        before = oracle.compiles
        rec = runner.run_one()
        trials += 1
        if oracle.compiles > before:
            compiles.append(rec.measurement.throughput if rec.feasible else None)
    return compiles


def near_at(compiles: list[Any], reference: float, budget: int) -> int:
    return next(
        (i for i, t in enumerate(compiles, 1) if t is not None and t >= NEAR * reference),
        budget + 1,
    )


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--set", default="develop", choices=("develop", "report"))
    parser.add_argument(
        "--family",
        default="structural",
        choices=sorted(FAMILIES),
        help="hidden IPUs to draw (random_ipus.py --family): structural, knobs (issue 41) or "
        "regions (issue 58)",
    )
    parser.add_argument(
        "--problems", type=int, default=3, help="the first N of search_efficiency.PROBLEMS"
    )
    parser.add_argument("--budget", type=int, default=12)
    parser.add_argument(
        "--first-draw",
        type=int,
        default=0,
        help="skip this many draws of the set (to split a run)",
    )
    parser.add_argument(
        "--reference-trials",
        type=int,
        default=None,
        help="the best known from search_efficiency's best-known search of this length (cached)",
    )
    parser.add_argument(
        "--kicks",
        type=int,
        default=20,
        help="the best-known search's kicks (with --reference-trials)",
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep each draw's warm store here (DRAW.journal)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI smoke: 1 draw, 2 problems, budget 3"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.draws, args.problems, args.budget = 1, 2, 3
    common.quiet_optuna()
    common.header(
        "Studies in sequence with the calibration store",
        "calibration_sequence.py",
        list(sys.argv[1:] if argv is None else argv),
    )
    keys = list(PROBLEMS)[: args.problems]
    rows: dict[str, Any] = {arm: [] for arm in ARMS}
    errors, unfit = [], []
    start = time.perf_counter()
    hidden, sets = FAMILIES[args.family]
    for draw_id in draw_ids(args.set, args.draws, args.first_draw, sets):
        with tempfile.TemporaryDirectory() as tmp:
            folder = args.keep or Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            journal = folder / f"{draw_id}.journal"
            journal.unlink(missing_ok=True)
            stores = {"warm": open_store(f"journal:///{journal}")}
            for i, key in enumerate(keys):
                problem = PROBLEMS[key]
                runs = {
                    arm: one_study(
                        problem, hidden(draw_id), args.budget, stores.get(arm), f"{key}-{arm}"
                    )
                    for arm in ARMS
                }
                if i == 0:
                    continue  # an empty store: every arm runs the same study
                seen = [t for compiles in runs.values() for t in compiles if t is not None]
                if args.reference_trials:
                    known = se.cached_best_known(
                        problem, hidden(draw_id), draw_id, args.reference_trials, args.kicks
                    )[0]
                    seen += [known] if known else []
                reference = max(seen) if seen else math.nan
                for arm, compiles in runs.items():
                    print(
                        f"draw {draw_id} {key} {arm} (best known {reference:.0f}): "
                        + " ".join("-" if t is None else f"{t:.0f}" for t in compiles),
                        flush=True,
                    )
                if not seen:  # nothing of the space is known to fit this draw: no figure to take
                    unfit.append(f"{key} on draw {draw_id}")
                    continue
                for arm, compiles in runs.items():
                    rows[arm].append(
                        {
                            "first_fits": bool(compiles) and compiles[0] is not None,
                            "near": near_at(compiles, reference, args.budget),
                            "best": max((t for t in compiles if t is not None), default=0.0)
                            / reference,
                        }
                    )
            records, _ = stores["warm"].records()
            e = loso(records)
            if e is not None:
                errors.append(e)
    print(
        f"\n{args.draws} draw(s) x problems 2..{len(keys)} ({', '.join(keys[1:])}), budget "
        f"{args.budget}, {time.perf_counter() - start:.0f} s"
    )
    best = (
        f"the best known ({args.reference_trials}-trial search, {args.kicks} kicks, or better "
        "found)"
        if args.reference_trials
        else "the best any arm found"
    )
    print(
        f"| arm | studies | first compile fits | within 5 % in {args.budget} | median compiles "
        f"to within 5 % of {best} | mean best@{args.budget} |"
    )
    print("|---|---|---|---|---|---|")
    for arm, rs in rows.items():
        if rs:
            fits = sum(r["first_fits"] for r in rs) / len(rs)
            near = sum(r["near"] <= args.budget for r in rs)
            print(
                f"| {arm} | {len(rs)} | {fits:.0%} | {near} | {median(r['near'] for r in rs):g} "
                f"| {sum(r['best'] for r in rs) / len(rs):.3f} |"
            )
    if unfit:
        print(f"left out, as no config of the space is known to fit there: {', '.join(unfit)}")
    print(f"wall time: {time.perf_counter() - start:.0f} s")
    if errors:

        def med(k: Any) -> Any:
            xs = [e[k] for e in errors if e[k] is not None]
            return f"{median(xs):.1%}" if xs else "-"

        print("\nleave-one-study-out, median over draws of each draw's median absolute error:")
        print(
            f"  busiest tile (fraction of a tile): nominal {med('memory_nominal')}, corrected "
            f"{med('memory_corrected')}"
        )
        print(
            f"  throughput (|log ratio|): nominal {med('throughput_nominal')}, corrected "
            f"{med('throughput_corrected')}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
