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
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from anywhere without installing
    sys.path.insert(0, str(REPO))

import optuna

from ipu_autotune.backends.base import Backend, Measurement
from ipu_autotune.backends.estimate import estimate
from ipu_autotune.backends.estimate.constants import NOMINAL, EstimatorConstants
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for

#: the CLI's defaults for `tune` (ipu_autotune/cli.py): estimates keep 5% of each tile free,
#: and with the PopTorch backend candidates estimated over memory by more than 25% skip the compile
DEFAULT_HEADROOM = 0.05
DEFAULT_SCREEN_MARGIN = 0.25

T = TypeVar("T")


def not_none(value: T | None) -> T:
    """`value`, which the run's own logic says is there (a fitting config's throughput): the
    check that lets the type checker follow, and a failure that names the broken premise."""
    assert value is not None, "expected a value, got None"
    return value


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
    return (
        f"machine: {cores} cores, {cpu_model()}; Python {platform.python_version()}, "
        f"torch {torch.__version__}, optuna {optuna.__version__}"
    )


def code_version() -> str:
    """The commit measured, read-only (`git rev-parse`, `git status`); 'unknown' without git."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "ipu_autotune"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
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


#: best-known searches kept between runs (they cost more than the strategies; see
#: search_efficiency.cached_best_known; reachable_floor's class searches too), in the repository
#: so a fresh clone has them: each is keyed by the hidden IPU's answers on a few probes and by
#: REFERENCE_SEARCH_VERSION (and its hidden IPU's `answers_version`), so a stale one is
#: searched again. IPU_AUTOTUNE_BENCH_CACHE moves it (a scratch folder, say).
REFERENCE_CACHE = Path(
    os.environ.get("IPU_AUTOTUNE_BENCH_CACHE", Path(__file__).resolve().parent / "reference")
)
#: The version of the searches whose results REFERENCE_CACHE keeps (search_efficiency's
#: best_known and its screens, ascent.py's climbs, reachable_floor's class searches,
#: compile_minutes): bump it with any change that could change what they find, and every
#: cached reference is searched again. A renaming or a move changes nothing: no bump.
REFERENCE_SEARCH_VERSION = 1


# --- tables and statistics ---------------------------------------------------------------


def markdown_table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A Markdown table (pastes into docs/performance.md as is). `align`: one of l/r per column."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(c) for c in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
        for i, h in enumerate(headers)
    ]

    def line(values: list[str]) -> str:
        out = []
        for v, w, a in zip(values, widths, align, strict=True):
            out.append(v.rjust(w) if a == "r" else v.ljust(w))
        return "| " + " | ".join(out) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2))
            for w, a in zip(widths, align, strict=True)
        )
        + "|"
    )
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
PERTURBED = (
    "code_base_bytes",
    "code_bytes_per_op",
    "matmul_efficiency",
    "tile_imbalance",
    "link_bandwidth_scale",
    "host_bandwidth_scale",
)


def hidden_constants(
    seed: int, spread: float = 0.3
) -> tuple[EstimatorConstants, dict[str, float]]:
    """NOMINAL with each PERTURBED constant multiplied by a factor in [1-spread, 1+spread].

    The factors depend on the seed only. tile_imbalance is kept >= 1: the busiest tile
    cannot hold less than the mean tile.
    """
    rng = seeded_random(f"hidden-ipu/{seed}")
    factors = {name: rng.uniform(1.0 - spread, 1.0 + spread) for name in PERTURBED}
    k = NOMINAL.scaled(**factors)
    k = replace(k, tile_imbalance=max(1.0, k.tile_imbalance))
    return k, factors


def seeded_random(key: str) -> Any:
    """A random.Random seeded by a string, the same in every process (unlike hash())."""
    import random

    return random.Random(
        int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    )


class HiddenIPU(Backend):
    """Stands in for hardware: the estimator with perturbed constants the tuner never sees,
    plus a deterministic per-config throughput noise. Every `measure` is one compile.

    An out-of-memory compile reports memory but no throughput, as on hardware.
    """

    name = "hidden-ipu"
    source = "compile"
    #: bump (in the subclass whose answers change) when a change to `evaluate` could change
    #: what the hidden IPU answers: its cached references (REFERENCE_CACHE) are searched again
    answers_version = 1

    def __init__(self, seed: int, noise: float = 0.03, spread: float = 0.3) -> None:
        self.seed, self.noise = seed, noise
        self.constants, self.factors = hidden_constants(seed, spread)
        self.compiles = 0
        self._cache: dict[tuple[Problem, Config], Measurement] = {}

    @property
    def sdk(self) -> str:
        """Each hidden IPU is its own 'SDK' to the calibration store: records of one never
        correct another (benchmarks/calibration_sequence.py)."""
        return f"{self.name}-{self.seed}"

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
                m.throughput = not_none(m.throughput) * j
                m.step_time_s = not_none(m.step_time_s) / j
            else:
                m.throughput, m.step_time_s = None, None
                m.reason = "hidden IPU: out of tile memory"
            self._cache[key] = m
        return self._cache[key]

    def measure(self, problem: Problem, config: Config) -> Measurement:
        self.compiles += 1
        return self.evaluate(problem, config)


# --- the hidden IPU that differs in structure ---------------------------------------------

#: busiest-tile excess per memory category, relative to the estimator's single imbalance:
#: (low, high) factor drawn per seed. Planner temporaries and activations spread over
#: tiles worse than weights; code and exchange vary with the op mix.
CATEGORY_IMBALANCE = {
    "weights": (0.9, 1.05),
    "optimizer": (0.9, 1.05),
    "gradients": (0.9, 1.05),
    "activations": (1.0, 1.25),
    "stash": (1.0, 1.25),
    "temporary": (1.05, 1.4),
    "code/exchange": (0.95, 1.3),
}
#: host input pipeline (decode, augment, collate) in input bytes per second it delivers: the
#: estimator assumes the host keeps up; here it caps samples/s (8-bit I/O sends a quarter).
HOST_PIPELINE_BYTES_PER_S = (4e9, 8e9)
#: per weight update: a fixed cost plus one per pipeline stage (sync, stream-copy setup), s
STEP_OVERHEAD_S = (0.5e-3, 2e-3)
STAGE_OVERHEAD_S = (0.1e-3, 0.4e-3)
#: per call of the model (host-side Python, stream callbacks), s, on top of the estimator's
CALL_OVERHEAD_S = (1e-3, 5e-3)


class StructuralHiddenIPU(HiddenIPU):
    """A hidden IPU that differs from the estimator in structure, not only in constants:

    - tile imbalance per memory category (CATEGORY_IMBALANCE), so the memory error depends
      on the config's mix (pipelined stash and temporaries vs weights), not one ratio;
    - a host input pipeline that caps samples/s (HOST_PIPELINE_BYTES_PER_S; 8-bit I/O and
      FP16 inputs send less), which the estimator does not model;
    - per-step and per-stage overheads (STEP_OVERHEAD_S, STAGE_OVERHEAD_S) and a larger
      per-call cost (CALL_OVERHEAD_S), which favour more accumulation and device iterations
      than the estimator does.

    On top of the constant perturbation and noise of HiddenIPU. Only the estimator's
    outputs (busiest tile, breakdown, throughput) and the config's fields are used, so it
    follows changes to the estimator.
    """

    name = "hidden-ipu-structural"

    def __init__(self, seed: int, noise: float = 0.03, spread: float = 0.3) -> None:
        super().__init__(seed, noise, spread)
        rng = seeded_random(f"hidden-ipu-structure/{seed}")
        self.category = {k: rng.uniform(*v) for k, v in CATEGORY_IMBALANCE.items()}
        self.host_bytes_per_s = rng.uniform(*HOST_PIPELINE_BYTES_PER_S)
        self.step_s, self.stage_s = rng.uniform(*STEP_OVERHEAD_S), rng.uniform(*STAGE_OVERHEAD_S)
        self.call_s = rng.uniform(*CALL_OVERHEAD_S)

    def evaluate(self, problem: Problem, config: Config) -> Measurement:
        key = (problem, config)
        if key not in self._cache:
            m = estimate(problem, config, profile_for(problem), self.constants)
            m.source, m.details = "compile", {}
            tiles = []
            for busiest, parts in zip(
                m.max_tile_bytes, m.breakdown or [{}] * len(m.max_tile_bytes), strict=True
            ):
                total = sum(parts.values())
                scale = (
                    sum(v * self.category.get(k, 1.0) for k, v in parts.items()) / total
                    if total
                    else 1.0
                )
                tiles.append(int(busiest * scale))
            m.max_tile_bytes = tiles
            m.feasible = max(tiles) <= m.tile_capacity_bytes
            m.failure = None if m.feasible else "oom"
            if m.feasible and m.throughput:
                per_call = (
                    problem.batch_size
                    * config.gradient_accumulation
                    * config.replicas
                    * config.device_iterations
                )
                stages = config.ipus_per_replica if config.pipelined else 1
                call = (
                    per_call / m.throughput
                    + config.device_iterations * (self.step_s + self.stage_s * stages)
                    + self.call_s
                )
                pixels = math.prod(problem.input_shape) if problem.input_shape else 0
                bytes_per_sample = pixels * (
                    1 if config.eight_bit_io else 2 if config.half_compute else 4
                )
                call = max(call, per_call * bytes_per_sample / self.host_bytes_per_s)
                j = self.jitter(config)
                m.throughput = per_call / call * j
                m.step_time_s = call / config.device_iterations / j
            else:
                m.throughput, m.step_time_s = None, None
                m.reason = "hidden IPU: out of tile memory"
            self._cache[key] = m
        return self._cache[key]


HIDDEN_KINDS = {"constants": HiddenIPU, "structural": StructuralHiddenIPU}


def compile_minutes(problem: Problem, config: Config) -> float:
    """Simulated compile time: 8 minutes for the workshop's ResNet-101 on 2 IPUs (about 225
    traced ops per IPU), scaling with the ops on the busiest IPU, 30% more with
    recomputation (the forward is laid out twice). An assumption for the --jobs timing."""
    ops = sum(u.ops for u in profile_for(problem).units) or 1
    per_ipu = ops / max(1, config.ipus_per_replica)
    recompute = 1.3 if config.effective_recompute in ("pipeline", "all", "standard") else 1.0
    return (1.5 + 6.5 * per_ipu / 225) * recompute
