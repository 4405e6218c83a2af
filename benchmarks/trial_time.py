"""Per-trial time of the README's study at trial 1,000, against trials 101-110, in one run.

Runs `ipu-autotune resnet101 --batch-size 64 --trials 1000` as a user does (estimate backend,
the default SQLite file `ipu-autotune.db` in a fresh folder, the live table drawn as on a
terminal, its output thrown away), each run in a child process. A trial's time is the time
between the ends of two consecutive `study.tell` calls: everything the tuner does for it (the
observers and the live table, ask and the sampler, the rules, the estimate, the writes).
Wall and CPU time (the child process's: on a shared machine wall time includes waiting for a
core). Target: under 50 ms at trial 1,000 (the mean of trials 991-1000).

With `--against REV` the same runs on that commit too (a temporary git worktree; this script
drives both), alternated over `--repeat` rounds so that both see the same load, and the report
gives each side's median, its spread (min-max) and the ratio. `--profile` profiles trials
951-1000 of one more run of this tree (cProfile, CPU time) and prints the top entries.

    python benchmarks/trial_time.py                              # this tree, once
    python benchmarks/trial_time.py --against main --repeat 3    # before/after, 6 runs
    python benchmarks/trial_time.py --profile                    # and where the time goes
    python benchmarks/trial_time.py --quick                      # 40 trials: a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COMMAND = ["resnet101", "--batch-size", "64"]  # the README's study
TARGET_MS = 50.0
EARLY = (101, 110)  # 1-based, inclusive
PROFILED = 50  # trials profiled with --profile: the last 50


# --- the child: one study in this process --------------------------------------------------


def child(trials: int, out: Path, profile: tuple[int, int] | None) -> None:
    """Run the study in a fresh folder; write the per-trial times (and the profile) to `out`."""
    import cProfile
    import io
    import pstats

    import optuna

    import ipu_autotune
    from ipu_autotune.cli import main as cli

    ends: list[tuple[float, float]] = []
    profiler = cProfile.Profile(time.process_time) if profile else None
    tell = optuna.study.Study.tell

    def timed_tell(study: Any, *args: Any, **kwargs: Any) -> Any:
        result = tell(study, *args, **kwargs)
        ends.append((time.perf_counter(), time.process_time()))
        if profiler is not None and profile is not None:
            if len(ends) == profile[0] - 1:  # trial profile[0] starts now
                profiler.enable()
            elif len(ends) == profile[1]:
                profiler.disable()
        return result

    optuna.study.Study.tell = timed_tell  # type: ignore[method-assign,assignment]  # measuring only
    with tempfile.TemporaryDirectory(prefix="ipu-autotune-trial-time-") as folder:
        os.chdir(folder)
        status = cli([*COMMAND, "--trials", str(trials)])
    if status != 0:
        raise SystemExit(f"the tune command ended with exit code {status}")
    wall = [(b[0] - a[0]) * 1e3 for a, b in pairwise(ends)]
    cpu = [(b[1] - a[1]) * 1e3 for a, b in pairwise(ends)]
    result = {"package": ipu_autotune.__file__, "wall": [None, *wall], "cpu": [None, *cpu]}
    if profiler is not None:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(20)
        result["profile"] = text.getvalue()
    out.write_text(json.dumps(result))


# --- the parent: runs, alternated, and the report ------------------------------------------


def run_tree(tree: Path, trials: int, profile: tuple[int, int] | None = None) -> dict[str, Any]:
    """One study on the code in `tree`, in a child process (this script, with `tree` first on
    its path), its output thrown away; the live table drawn as on an 80-column terminal."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(out),
            "--trials",
            str(trials),
        ]
        if profile:
            argv += ["--profile-trials", f"{profile[0]}-{profile[1]}"]
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "FORCE_COLOR": "1",
            "COLUMNS": "80",
            "LINES": "40",
        }
        done = subprocess.run(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"the run on {tree} failed:\n{done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(out.read_text())
    if not Path(result["package"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the run meant for {tree} imported {result['package']}")
    return result


def mean(xs: list[float | None], lo: int, hi: int) -> float:
    """Mean of trials lo..hi (1-based, inclusive)."""
    window = [x for x in xs[lo - 1 : hi] if x is not None]
    return sum(window) / len(window)


def windows(trials: int) -> tuple[tuple[int, int], tuple[int, int]]:
    late = (trials - 9, trials)
    return (EARLY if trials >= EARLY[1] + 10 else (1 + trials // 10, 10 + trials // 10)), late


def summary(result: dict[str, Any], trials: int) -> dict[str, float]:
    early, late = windows(trials)
    out = {}
    for kind in ("wall", "cpu"):
        out[f"{kind} early"] = mean(result[kind], *early)
        out[f"{kind} late"] = mean(result[kind], *late)
        out[f"{kind} late50"] = mean(result[kind], max(2, trials - 49), trials)
    return out


def worktree_at(rev: str, folder: Path) -> Path:
    tree = folder / "tree"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    return tree


def spread(xs: list[float], digits: int = 1) -> str:
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def report(runs: dict[str, list[dict[str, float]]], trials: int) -> None:
    import common

    early, late = windows(trials)
    e, l_ = f"{early[0]}-{early[1]}", f"{late[0]}-{late[1]}"
    rows = []
    for name, sums in runs.items():
        for i, s in enumerate(sums, 1):
            rows.append(
                [
                    name,
                    str(i),
                    f"{s['wall early']:.1f}",
                    f"{s['wall late']:.1f}",
                    f"{s['wall late'] / s['wall early']:.2f}",
                    f"{s['wall late50']:.1f}",
                    f"{s['cpu early']:.1f}",
                    f"{s['cpu late']:.1f}",
                    f"{s['cpu late'] / s['cpu early']:.2f}",
                    f"{s['cpu late50']:.1f}",
                ]
            )
    print("## Per-trial time, ms (mean over the trials named)\n")
    print(
        common.markdown_table(
            [
                "code",
                "run",
                f"wall {e}",
                f"wall {l_}",
                "ratio",
                f"wall {max(2, trials - 49)}-{trials}",
                f"CPU {e}",
                f"CPU {l_}",
                "CPU ratio",
                f"CPU {max(2, trials - 49)}-{trials}",
            ],
            rows,
            "lrrrrrrrrr",
        )
    )
    print("\n## Median over runs (min-max)\n")
    rows = []
    for name, sums in runs.items():
        late_wall = [s["wall late"] for s in sums]
        rows.append(
            [
                name,
                spread([s["wall early"] for s in sums]),
                spread(late_wall),
                spread([s["wall late"] / s["wall early"] for s in sums], 2),
                spread([s["cpu late"] for s in sums]),
                spread([s["wall late50"] for s in sums]),
                spread([s["cpu late50"] for s in sums]),
                "met" if statistics.median(late_wall) < TARGET_MS else "not met",
            ]
        )
    print(
        common.markdown_table(
            [
                "code",
                f"wall {e}",
                f"wall {l_}",
                "ratio",
                f"CPU {l_}",
                f"wall {max(2, trials - 49)}-{trials}",
                f"CPU {max(2, trials - 49)}-{trials}",
                f"target < {TARGET_MS:.0f} ms (wall)",
            ],
            rows,
            "lrrrrrrl",
        )
    )
    if len(runs) == 2:
        (a, before), (b, after) = runs.items()
        for kind in ("wall", "cpu"):
            for key, span in (("late", l_), ("late50", f"{max(2, trials - 49)}-{trials}")):
                ratio = statistics.median(x[f"{kind} {key}"] for x in after) / statistics.median(
                    x[f"{kind} {key}"] for x in before
                )
                print(f"\n{kind} at trials {span}: {b} / {a} = {ratio:.2f}x (medians)", end="")
        print()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--trials", type=int, default=None, help="trials per run (default 1000; >= 20)"
    )
    ap.add_argument("--quick", action="store_true", help="40 trials (a smoke test of the script)")
    ap.add_argument(
        "--against", metavar="REV", help="also run this commit, alternating with this tree"
    )
    ap.add_argument("--repeat", type=int, default=1, help="rounds (default 1)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help=f"profile the last {PROFILED} trials of one more run",
    )
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--profile-trials", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.trials = args.trials or (40 if args.quick else 1000)
    if args.trials < 20:
        print("error: --trials must be at least 20 (two windows of 10)", file=sys.stderr)
        return 2
    if args.child:
        window = (
            tuple(int(x) for x in args.profile_trials.split("-")) if args.profile_trials else None
        )
        child(args.trials, args.child, window)  # type: ignore[arg-type]
        return 0
    if (
        args.against
        and subprocess.run(
            [
                "git",
                "-C",
                str(REPO),
                "rev-parse",
                "--verify",
                "--quiet",
                f"{args.against}^{{commit}}",
            ],
            capture_output=True,
        ).returncode
        != 0
    ):
        print(f"error: --against {args.against}: not a commit of this repository", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    import common

    common.header(
        "Per-trial time of the README's study (tune, estimate backend, SQLite)",
        "trial_time.py",
        argv,
    )
    started = time.perf_counter()
    runs: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": REPO}
        if args.against:
            trees = {args.against: worktree_at(args.against, Path(tmp)), **trees}
        try:
            for round_ in range(args.repeat):
                for name, tree in trees.items():
                    runs.setdefault(name, []).append(
                        summary(run_tree(tree, args.trials), args.trials)
                    )
                    print(
                        f"  round {round_ + 1}, {name}: done ({time.perf_counter() - started:.0f} "
                        "s)",
                        flush=True,
                    )
        finally:
            if args.against:
                subprocess.run(
                    [
                        "git",
                        "-C",
                        str(REPO),
                        "worktree",
                        "remove",
                        "--force",
                        str(trees[args.against]),
                    ],
                    check=False,
                    capture_output=True,
                )
    print()
    report(runs, args.trials)
    if args.profile:
        window = (args.trials - PROFILED + 1, args.trials)
        print(
            f"\n## Profile of trials {window[0]}-{window[1]}, this tree (cProfile, CPU seconds)\n"
        )
        print(run_tree(REPO, args.trials, window)["profile"])
    print(f"\nwall time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
