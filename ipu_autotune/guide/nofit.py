"""When nothing fits: what the closest trial lacks, and the two problem changes that help most.

The two levers outside the search space are more IPUs and a smaller micro-batch. Each is
tried on the estimator from the closest trial's configuration, so the advice says how far
each goes ("fits at micro-batch 16", "--ipus 4: busiest tile at 130%"), always as estimated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..backends.base import Measurement, format_bytes
from ..problem import Config, Problem
from ..rules.cross_field import violations

#: the exit code of a study in which no trial fits (documented in the README and cli.py)
EXIT_NOTHING_FITS = 3


@dataclass
class Change:
    flag: str  # e.g. "--batch-size 16"
    result: str  # what the estimator says of the closest configuration with it
    fits: bool
    tile_fraction: float  # the busiest tile against tile memory, with the change

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def lacks(m: Measurement) -> str:
    """'the busiest tile of IPU1 needs 135% of tile memory (312 MB more on that IPU)'."""
    if m.failure not in (None, "oom"):
        return f"{m.failure}: {m.reason}" if m.reason else m.failure
    worst = m.worst_overflow()
    if worst is None or not m.tile_capacity_bytes:
        return m.verdict()
    ipu, over = worst
    used = m.max_tile_bytes[ipu] / m.tile_capacity_bytes
    more = f" ({format_bytes(over)} more on that IPU)" if over else ""
    keep = f"; estimates must also keep {m.headroom:.0%} free" if m.headroom else ""
    return f"the busiest tile of IPU{ipu} needs {used:.0%} of a tile's memory{more}{keep}"


def _fraction(m: Measurement) -> float:
    if not m.max_tile_bytes or not m.tile_capacity_bytes:
        return float("inf")
    return max(m.max_tile_bytes) / m.tile_capacity_bytes


def smaller_batch(problem: Problem, config: Config, backend) -> Change | None:
    """Halve the micro-batch until the closest configuration fits (or micro-batch 1)."""
    if problem.batch_size == 1:
        return None
    bs, m, trial_problem = problem.batch_size, None, problem
    while bs > 1:
        bs //= 2
        trial_problem = dataclasses.replace(problem, batch_size=bs)
        candidate = config
        if problem.global_batch:  # the global batch stays: accumulate more
            candidate = config.replace(gradient_accumulation=max(1, problem.global_batch // (bs * config.replicas)))
        if violations(trial_problem, candidate, None):
            continue
        m = backend.measure(trial_problem, candidate)
        if m.feasible:
            break
    if m is None:
        return None
    verdict = "the closest configuration fits" if m.feasible else \
        f"busiest tile still at {_fraction(m):.0%}"
    return Change(f"--batch-size {bs}", f"{verdict} (estimated)", m.feasible, _fraction(m))


def more_ipus(problem: Problem, config: Config, backend, profile) -> Change | None:
    """Twice the IPUs, the closest configuration's numerics kept, pipelined over all of them."""
    from .warmstart import naive_baseline

    bigger = dataclasses.replace(problem, ipus=problem.ipus * 2)
    layout = naive_baseline(bigger, profile)
    if layout.ipus_per_replica <= config.ipus_per_replica * config.replicas:
        return None  # the model has no more places to split
    tried = []
    # Pipelined stashes activations per stage; sharded does not: whichever needs less.
    for execution in ("pipelined", "sharded"):
        candidate = config.replace(
            ipus_per_replica=layout.ipus_per_replica, replicas=1, splits=layout.splits,
            execution=execution, replicated_tensor_sharding=False,
            available_memory_proportion=(config.available_memory_proportion[0],) * layout.ipus_per_replica,
            gradient_accumulation=max(config.gradient_accumulation, layout.gradient_accumulation))
        if not violations(bigger, candidate, profile.module_order):
            tried.append((execution, backend.measure(bigger, candidate)))
    if not tried:
        return None
    execution, m = min(tried, key=lambda t: (not t[1].feasible, _fraction(t[1])))
    where = f"{execution} over {layout.ipus_per_replica} IPUs"
    verdict = f"the closest configuration fits, {where}" if m.feasible else \
        f"busiest tile at {_fraction(m):.0%}, {where}"
    return Change(f"--ipus {bigger.ipus}", f"{verdict} (estimated)", m.feasible, _fraction(m))


def best_changes(problem: Problem, config: Config, profile, headroom: float) -> list[Change]:
    """The two changes, the one that helps most first (fits, then the lower busiest tile)."""
    from ..backends.estimate import EstimateBackend

    backend = EstimateBackend(headroom=headroom)
    found = [c for c in (more_ipus(problem, config, backend, profile), smaller_batch(problem, config, backend))
             if c is not None]
    return sorted(found, key=lambda c: (not c.fits, c.tile_fraction))
