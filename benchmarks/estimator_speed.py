"""How fast the estimator is: tracing a model once, then each estimate.

Trace: `trace_model` (build on the meta device, one training forward, attribute ops to
units) timed in a fresh Python process per model, after importing torch, torchvision.models
and ipu_autotune (timed apart), so the first trace pays the rest of what a user's first run
pays (dispatcher and meta-kernel warm-up included); a second, uncached trace in the same
process shows the steady state. Estimate: `estimate()` on configs
sampled at random from the model's search space (plus the warm starts), timed one by one
after tracing.

    python benchmarks/estimator_speed.py           # 6 models, 1000 estimates each
    python benchmarks/estimator_speed.py --quick   # resnet18 and resnet101, 200 estimates
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import optuna
from common import DEFAULT_HEADROOM, markdown_table, median, quantile

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.problem import Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.space import SearchSpace

MODELS = ("resnet18", "resnet50", "resnet101", "resnet152", "vit_b_16", "efficientnet_b0")
QUICK_MODELS = ("resnet18", "resnet101")
BATCH, SHAPE, IPUS = 16, (3, 224, 224), 4
TARGET_MS = 5.0  # one estimate of resnet101 after tracing

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
from ipu_autotune.profiles.trace import trace_model
t1 = time.perf_counter()
import torchvision.models  # what a first trace of a torchvision model imports
tv = time.perf_counter() - t1
t1 = time.perf_counter()
first = trace_model({model!r}, {batch}, {shape!r}, 1000)
t2 = time.perf_counter()
second = trace_model({model!r}, {batch}, {shape!r}, 1000)
t3 = time.perf_counter()
print(json.dumps({{"import": t1 - t0 - tv, "torchvision": tv, "first": t2 - t1,
                  "second": t3 - t2, "units": len(first.units),
                  "ops": sum(u.ops for u in first.units), "params": first.params}}))
"""


def trace_cold(model: str) -> dict[str, Any]:
    code = _CHILD.format(repo=str(common.REPO), model=model, batch=BATCH, shape=SHAPE)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    times: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return times


def sample_configs(problem: Problem, n: int, seed: int = 0) -> list[Any]:
    """n valid configs drawn at random from the model's search space, warm starts first."""
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    baseline = naive_baseline(problem, profile)
    configs = [
        p.config for p in proposals(problem, profile, space, baseline, headroom=DEFAULT_HEADROOM)
    ]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    while len(configs) < n:
        trial = study.ask()
        c = space.sample(trial, problem, profile)
        study.tell(trial, 0.0)
        if not violations(problem, c, profile.module_order):
            configs.append(c)
    return configs[:n]


def time_estimates(problem: Problem, configs: list[Any]) -> list[float]:
    profile = profile_for(problem)
    for c in configs[:20]:  # warm the code paths
        estimate(problem, c, profile, headroom=DEFAULT_HEADROOM)
    out = []
    for c in configs:
        t = time.perf_counter()
        estimate(problem, c, profile, headroom=DEFAULT_HEADROOM)
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help=f"{' and '.join(QUICK_MODELS)}, 200 estimates"
    )
    ap.add_argument("--models", nargs="+", default=None, help=f"default: {' '.join(MODELS)}")
    ap.add_argument(
        "--estimates", type=int, default=None, help="estimates per model (default 1000; quick 200)"
    )
    args = ap.parse_args(argv)
    models = args.models or list(QUICK_MODELS if args.quick else MODELS)
    n = args.estimates or (200 if args.quick else 1000)

    common.quiet_optuna()
    common.header("Estimator speed: trace once, then estimate", "estimator_speed.py", argv)
    print(
        f"micro-batch {BATCH}, input {'x'.join(map(str, SHAPE))}, {IPUS} Mk2 IPUs; "
        f"{n} estimates per model of configs sampled at random from its search space\n",
        flush=True,
    )

    start = time.perf_counter()
    rows, ratios = [], []
    results: dict[str, dict[str, Any]] = {}
    for model in models:
        cold = trace_cold(model)
        problem = Problem(model, BATCH, SHAPE, ipus=IPUS)
        profile_for(problem)
        configs = sample_configs(problem, n)
        times = time_estimates(problem, configs)
        profile = profile_for(problem)
        t = time.perf_counter()
        proposals(
            problem,
            profile,
            SearchSpace.load(problem),
            naive_baseline(problem, profile),
            headroom=DEFAULT_HEADROOM,
        )
        warm_starts = time.perf_counter() - t
        med, p90 = median(times), quantile(times, 0.9)
        results[model] = {"cold": cold, "median": med, "p90": p90, "warm_starts": warm_starts}
        rows.append(
            [
                model,
                str(cold["units"]),
                str(cold["ops"]),
                f"{cold['params'] / 1e6:.1f}M",
                f"{cold['first']:.2f}",
                f"{cold['second']:.2f}",
                f"{med * 1e3:.3f}",
                f"{p90 * 1e3:.3f}",
                f"{max(times) * 1e3:.2f}",
                f"{warm_starts:.2f}",
            ]
        )
        ratios.append(
            [
                model,
                f"{cold['first'] / med:,.0f}",
                f"{cold['first'] / cold['second']:.1f}x",
                f"{TARGET_MS / 1e3 / med:.0f}x",
            ]
        )
        print(
            f"  {model}: traced in {cold['first']:.2f} s, estimate median {med * 1e3:.3f} ms",
            flush=True,
        )
    elapsed = time.perf_counter() - start

    print("\n## Trace (fresh process) and estimate times\n")
    print(
        markdown_table(
            [
                "model",
                "units",
                "ops",
                "params",
                "first trace s",
                "second trace s",
                "estimate median ms",
                "p90 ms",
                "max ms",
                "warm starts s",
            ],
            rows,
        )
    )
    print("\n## Ratios\n")
    print(
        markdown_table(
            [
                "model",
                "estimates per first trace",
                "first / second trace",
                f"{TARGET_MS:.0f} ms / median estimate",
            ],
            ratios,
        )
    )
    if "resnet101" in results:
        med = results["resnet101"]["median"] * 1e3
        print(
            f"\nTarget: one resnet101 estimate after tracing under {TARGET_MS:.0f} ms: "
            f"median {med:.3f} ms, p90 {results['resnet101']['p90'] * 1e3:.3f} ms -> "
            f"{'met' if med < TARGET_MS else 'not met'}"
        )
    print(
        f"\nimports in a fresh process, not in the trace times (medians): torch + ipu_autotune "
        f"{median([r['cold']['import'] for r in results.values()]):.2f} s, torchvision.models "
        f"{median([r['cold']['torchvision'] for r in results.values()]):.2f} s"
    )
    print(f"\nwall time: {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
