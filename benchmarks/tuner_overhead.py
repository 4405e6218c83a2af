"""Wall time per trial of the tuner itself, and how it grows with the study.

The real `Runner` with the real `create_sampler()` (multivariate TPE) and the warm starts
of `ipu-autotune tune`, on the estimate backend, so each trial's time is the tuner's own
cost: the sampler's ask, search-space sampling, the rules, one estimate, the storage writes
and tell. Measured on an SQLite file, a journal file and (for reference) in memory.

With `--samplers windowed full` (the default) each storage runs twice: with the shipped
sampler (TPE over a window of the study, search/window.py) and with Optuna's TPESampler
over every trial, as before the window. Besides wall time per trial it reports CPU time per
trial (this process only): on a shared machine wall time includes waiting for the CPU.

    python benchmarks/tuner_overhead.py           # 1000 trials per storage and sampler
    python benchmarks/tuner_overhead.py --quick   # 100 trials
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
from common import DEFAULT_HEADROOM, markdown_table
from optuna.samplers import BaseSampler

from ipu_autotune.backends.base import Backend
from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.problem import Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study import records as st
from ipu_autotune.study.runner import Runner
from ipu_autotune.study.storage import open_storage

PROBLEM = Problem("resnet101", 64, (3, 64, 64), ipus=2)  # the default run
STORAGES = ("sqlite", "journal", "memory")
SAMPLERS = ("windowed", "full")
TARGET_MS = 50.0


class _Timed(Backend):
    """The estimate backend, timing its own share of each trial."""

    name = "estimate"

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.seconds: list[float] = []

    def measure(self, problem: Any, config: Any) -> Any:
        t = time.perf_counter()
        m = self.inner.measure(problem, config)
        self.seconds.append(time.perf_counter() - t)
        return m


def windows(n: int) -> list[tuple[int, int]]:
    """Trials 1-10, 91-100, 991-1000, ... (1-based, inclusive) that fit in n."""
    out, end = [], 10
    while end <= n:
        out.append((end - 9, end))
        end *= 10
    if n % 10 == 0 and (not out or out[-1][1] != n):
        out.append((n - 9, n))
    return out


def run_storage(kind: str, trials: int, folder: Path, sampler: str = "windowed") -> dict[str, Any]:
    url = {
        "sqlite": f"sqlite:///{folder / f'overhead-{sampler}.db'}",
        "journal": f"journal:///{folder / f'overhead-{sampler}.journal'}",
        "memory": "memory:",
    }[kind]
    shipped = st.create_sampler

    def full_history(
        seed: int | None, window: int | None = None, startup_trials: int = st.STARTUP_TRIALS
    ) -> BaseSampler:
        # every finished trial, whatever the caller asks
        return shipped(seed, window=None, startup_trials=startup_trials)

    if sampler == "full":
        st.create_sampler = full_history
    try:
        return _run(kind, url, trials, sampler)
    finally:
        st.create_sampler = shipped


def _run(kind: str, url: str, trials: int, sampler: str) -> dict[str, Any]:
    problem = PROBLEM
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    baseline = naive_baseline(problem, profile)
    storage = open_storage(url)
    t = time.perf_counter()

    def on_create(study: Any) -> None:
        study.set_user_attr(st.ATTR_SPACE, space.to_dict())
        st.enqueue(
            study,
            space,
            problem,
            profile,
            proposals(problem, profile, space, baseline, headroom=DEFAULT_HEADROOM),
        )

    study, _ = st.open_study(storage, problem.slug, problem, 0, on_create)
    setup = time.perf_counter() - t
    backend = _Timed(EstimateBackend(headroom=DEFAULT_HEADROOM))
    runner = Runner(study, problem, profile, space, backend)
    per_trial, cpu = [], []
    for _ in range(trials):
        t, c = time.perf_counter(), time.process_time()
        runner.run_one()
        per_trial.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    t = time.perf_counter()
    best = st.best_record(study)  # what the summary reads at the end
    n_records = len(st.records(study))
    summary = time.perf_counter() - t
    return {
        "storage": f"{kind}, {sampler}",
        "per_trial": per_trial,
        "cpu": cpu,
        "estimate": backend.seconds,
        "setup": setup,
        "summary": summary,
        "best": best.measurement.throughput if best else None,
        "records": n_records,
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="stop at 100 trials")
    ap.add_argument(
        "--trials", type=int, default=None, help="trials per storage (default 1000; quick 100)"
    )
    ap.add_argument("--storages", nargs="+", choices=STORAGES, default=list(STORAGES))
    ap.add_argument(
        "--samplers",
        nargs="+",
        choices=SAMPLERS,
        default=list(SAMPLERS),
        help="windowed: as shipped; full: TPE over every trial (before the window)",
    )
    args = ap.parse_args(argv)
    trials = args.trials or (100 if args.quick else 1000)

    common.quiet_optuna()
    common.header(
        "Tuner overhead: wall time per trial on the estimate backend", "tuner_overhead.py", argv
    )
    print(
        f"problem {PROBLEM.slug}; Runner + create_sampler() (multivariate TPE) + warm starts; "
        f"{trials} trials per storage\n",
        flush=True,
    )
    profile_for(PROBLEM)  # trace outside the timings

    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="ipu-autotune-overhead-") as tmp:
        for sampler in args.samplers:
            for kind in args.storages:
                results.append(run_storage(kind, trials, Path(tmp), sampler))
                r = results[-1]
                print(
                    f"  {r['storage']}: {trials} trials in {sum(r['per_trial']):.1f} s", flush=True
                )
    elapsed = time.perf_counter() - start

    ws = windows(trials)
    rows = []
    for r in results:
        pt, est = r["per_trial"], r["estimate"]
        cells = [r["storage"]]
        for lo, hi in ws:
            cells.append(f"{sum(pt[lo - 1 : hi]) / (hi - lo + 1) * 1e3:.1f}")
        cells += [
            f"{sum(pt) / len(pt) * 1e3:.1f}",
            f"{max(pt) * 1e3:.0f}",
            f"{sum(est) / max(1, len(est)) * 1e3:.2f}",
            f"{r['setup']:.2f}",
            f"{r['summary'] * 1e3:.0f}",
            f"{sum(pt):.1f}",
        ]
        rows.append(cells)
    print("\n## Mean wall time per trial, ms (each window: mean over those trials)\n")
    print(
        markdown_table(
            [
                "storage, sampler",
                *(f"trials {lo}-{hi}" for lo, hi in ws),
                f"all {trials}",
                "max",
                "estimate share",
                "warm starts s",
                "final summary ms",
                "total s",
            ],
            rows,
        )
    )

    last = ws[-1]
    print(
        f"\n## Target: under {TARGET_MS:.0f} ms per trial at trial {last[1]} (mean of trials "
        f"{last[0]}-{last[1]})\n"
    )
    rows = []
    for r in results:
        n = last[1] - last[0] + 1
        ms = sum(r["per_trial"][last[0] - 1 : last[1]]) / n * 1e3
        cpu_ms = sum(r["cpu"][last[0] - 1 : last[1]]) / n * 1e3
        rows.append(
            [r["storage"], f"{ms:.1f}", f"{cpu_ms:.1f}", "met" if ms < TARGET_MS else "not met"]
        )
    print(
        markdown_table(
            [
                "storage, sampler",
                f"wall ms/trial at {last[1]}",
                f"CPU ms/trial at {last[1]}",
                "target (wall)",
            ],
            rows,
            "lrrl",
        )
    )
    if trials < 1000:
        print(f"\n(stopped at {trials} trials: the 1000-trial target is checked by the full run)")
    print(f"\nwall time: {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
