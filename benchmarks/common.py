"""Helpers shared by the benchmarks: the machine line, the reproduce command, the hidden
IPU oracle, compile screening, Markdown tables and robust statistics.

The benchmarks are scripts (`python benchmarks/NAME.py`), so this module is imported as
`common` with the benchmarks folder first on sys.path.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shlex
import sys
import warnings
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from anywhere without installing
    sys.path.insert(0, str(REPO))

import optuna

from ipu_autotune.backends.base import Backend, Measurement
from ipu_autotune.backends.estimate import estimate
from ipu_autotune.backends.estimate.constants import NOMINAL, EstimatorConstants
from ipu_autotune.models.trace import profile_for
from ipu_autotune.problem import Config, Problem

#: the CLI's defaults for `tune` (ipu_autotune/cli.py): estimates keep 5% of each tile free,
#: and with the PopTorch backend candidates estimated over memory by more than 25% skip the compile
DEFAULT_HEADROOM = 0.05
DEFAULT_SCREEN_MARGIN = 0.25


def quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)


# --- where and how it ran ----------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"machine: {cores} cores, {cpu_model()}; Python {platform.python_version()}, "
            f"torch {torch.__version__}, optuna {optuna.__version__}")


def code_version() -> str:
    """The commit measured, read-only (`git rev-parse`, `git status`); 'unknown' without git."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "ipu_autotune"],
                               cwd=REPO, capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" with uncommitted changes to ipu_autotune/" if dirty else "")


def command_line(script: str, argv: list[str]) -> str:
    return "python " + shlex.join([f"benchmarks/{script}", *argv])


def header(title: str, script: str, argv: list[str]) -> None:
    print(f"# {title}")
    print(machine_line())
    print(f"code: commit {code_version()}")
    print(f"command: {command_line(script, argv)}")
    print(flush=True)


# --- tables and statistics ---------------------------------------------------------------

def markdown_table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A Markdown table (pastes into docs/performance.md as is). `align`: one of l/r per column."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        out = []
        for v, w, a in zip(values, widths, align):
            out.append(v.rjust(w) if a == "r" else v.ljust(w))
        return "| " + " | ".join(out) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2)) for w, a in zip(widths, align)) + "|"
    return "\n".join([line(headers), rule, *(line(r) for r in cells)])


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile; `inf` (a censored run) sorts last and stays inf."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or xs[lo] == xs[hi]:
        return xs[lo]
    if math.isinf(xs[hi]):
        return math.inf
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    return quantile(values, 0.5)


def fmt_count(x: float, budget: int | None = None) -> str:
    if math.isnan(x):
        return "-"
    if math.isinf(x):
        return f">{budget}" if budget else "never"
    return f"{x:.1f}".removesuffix(".0")


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


# --- the hidden IPU ----------------------------------------------------------------------

#: what the hidden IPU changes: always-live memory, compute efficiency, the busiest tile's
#: excess over the mean, link and host bandwidth
PERTURBED = ("code_base_bytes", "code_bytes_per_op", "matmul_efficiency", "tile_imbalance",
             "link_bandwidth_scale", "host_bandwidth_scale")


def hidden_constants(seed: int, spread: float = 0.3) -> tuple[EstimatorConstants, dict[str, float]]:
    """NOMINAL with each PERTURBED constant multiplied by a factor in [1-spread, 1+spread].

    The factors depend on the seed only. tile_imbalance is kept >= 1: the busiest tile
    cannot hold less than the mean tile.
    """
    rng = seeded_random(f"hidden-ipu/{seed}")
    factors = {name: rng.uniform(1.0 - spread, 1.0 + spread) for name in PERTURBED}
    k = NOMINAL.scaled(**factors)
    k = replace(k, tile_imbalance=max(1.0, k.tile_imbalance))
    return k, factors


def seeded_random(key: str):
    """A random.Random seeded by a string, the same in every process (unlike hash())."""
    import random

    return random.Random(int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big"))


class HiddenIPU(Backend):
    """Stands in for hardware: the estimator with perturbed constants the tuner never sees,
    plus a deterministic per-config throughput noise. Every `measure` is one compile.

    An out-of-memory compile reports memory but no throughput, as on hardware.
    """

    name = "hidden-ipu"
    source = "compile"

    def __init__(self, seed: int, noise: float = 0.03, spread: float = 0.3):
        self.seed, self.noise = seed, noise
        self.constants, self.factors = hidden_constants(seed, spread)
        self.compiles = 0
        self._cache: dict[tuple[Problem, Config], Measurement] = {}

    def jitter(self, config: Config) -> float:
        """1 + u, u uniform in [-noise, noise], fixed per (seed, config)."""
        key = f"{self.seed}|{json.dumps(config.to_dict(), sort_keys=True)}".encode()
        u = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64
        return 1.0 + self.noise * (2.0 * u - 1.0)

    def evaluate(self, problem: Problem, config: Config) -> Measurement:
        """What a compile and run would give, without counting a compile."""
        key = (problem, config)
        if key not in self._cache:
            m = estimate(problem, config, profile_for(problem), self.constants)
            m.source = "compile"
            m.details = {}
            if m.feasible:
                j = self.jitter(config)
                m.throughput = m.throughput * j
                m.step_time_s = m.step_time_s / j
            else:
                m.throughput, m.step_time_s = None, None
                m.reason = "hidden IPU: out of tile memory"
            self._cache[key] = m
        return self._cache[key]

    def measure(self, problem: Problem, config: Config) -> Measurement:
        self.compiles += 1
        return self.evaluate(problem, config)


