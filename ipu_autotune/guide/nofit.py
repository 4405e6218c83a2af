"""When nothing fits: what the closest trial lacks, and the texts of `plan`.

`plan` (study/planning.py: `tune`'s own search at each IPU count) and the exit-3 advice
(study/plan_advice.py) say things in the words below: the exact model state against the
SRAM it must fit in (`model_state`, `state_line`: parameters times bytes, no error bar), the
stage no split can shrink (`why_nothing_fits`), and why a row is slower per IPU or busier
than the size before (`row_reason`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..backends.base import Backend, Measurement, format_bytes
from ..problem import Config, Problem
from ..rules.cross_field import violations
from .least_memory import least_on_chip, longest_replica, model_state


class PlanRow(Protocol):
    """What the reasons here read of one hardware size's row (study/planning.SizePlan), said as
    a protocol so the guide does not import the study that builds on it."""

    @property
    def ipus(self) -> int: ...
    @property
    def micro_batch(self) -> int: ...
    @property
    def config(self) -> Config: ...
    @property
    def measurement(self) -> Measurement: ...


#: the exit code of a study in which no trial fits (documented in the README and cli.py)
EXIT_NOTHING_FITS = 3


@dataclass
class Change:
    flag: str  # e.g. "--batch-size 16"
    result: str  # what the estimator says of the closest configuration with it
    fits: bool
    tile_fraction: float  # the busiest tile against tile memory, with the change

    def to_dict(self) -> dict[str, Any]:
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


def tile_fraction(m: Measurement) -> float:
    if not m.max_tile_bytes or not m.tile_capacity_bytes:
        return float("inf")
    return max(m.max_tile_bytes) / m.tile_capacity_bytes


def smaller_batch(problem: Problem, config: Config, backend: Backend) -> Change | None:
    """Halve the micro-batch until the closest configuration fits (or micro-batch 1)."""
    if problem.batch_size == 1:
        return None
    bs, m, trial_problem = problem.batch_size, None, problem
    while bs > 1:
        bs //= 2
        trial_problem = dataclasses.replace(problem, batch_size=bs)
        candidate = config
        if problem.global_batch:  # the global batch stays: accumulate more
            candidate = config.replace(
                gradient_accumulation=max(1, problem.global_batch // (bs * config.replicas))
            )
        if violations(trial_problem, candidate, None):
            continue
        m = backend.measure(trial_problem, candidate)
        if m.feasible:
            break
    if m is None:
        return None
    verdict = (
        "the closest configuration fits"
        if m.feasible
        else f"busiest tile still at {tile_fraction(m):.0%}"
    )
    return Change(f"--batch-size {bs}", f"{verdict} (estimated)", m.feasible, tile_fraction(m))


def layout_text(config: Config) -> str:
    """'2x4 pipe 16.16': IPUs per replica x replicas, how a replica's IPUs run, the precision."""
    how = (
        ""
        if config.ipus_per_replica == 1
        else {"pipelined": " pipe", "sharded": " shard"}.get(
            config.execution, f" {config.execution}"
        )
    )
    return f"{config.ipus_per_replica}x{config.replicas}{how} {config.precision}"


# --- the plan: the hardware the model needs ------------------------------------------------------

#: the share of a tile one tensor's weights take, spread over the IPU's tiles, from which
#: `why_nothing_fits` names that tensor as what no split can shrink
TENSOR_SHARE = 0.25


def why_nothing_fits(problem: Problem, plans: Sequence[PlanRow]) -> str:
    """At the size that came closest, its configuration's busiest tile against a tile's memory,
    the units its IPU holds, and their largest tensor spread over the IPU's tiles: a pipeline
    places whole units, so no split shrinks that tensor."""
    from ..backends.targets import get_target
    from ..profiles.trace import profile_for

    last = min(plans, key=lambda p: p.measurement.violation)  # the closest size
    m = last.measurement
    ipu = m.worst_ipu()
    if ipu is None or not m.tile_capacity_bytes or "stage_units" not in m.details:
        return f"at {last.ipus} IPUs the closest configuration is {m.verdict()}"
    profile = profile_for(
        dataclasses.replace(problem, ipus=last.ipus, batch_size=last.micro_batch)
    )
    first, end = m.details["stage_units"][ipu]
    units = profile.units[first : end + 1]
    top = max(m.breakdown[ipu], key=m.breakdown[ipu].__getitem__)
    held = units[0].path if len(units) == 1 else f"{units[0].path} to {units[-1].path}"
    said = (
        f"at {last.ipus} IPUs (micro-batch {last.micro_batch}) the closest configuration's "
        f"busiest tile, on IPU{ipu}, needs {_kb(m.max_tile_bytes[ipu])} against a tile's "
        f"{_kb(m.tile_capacity_bytes)} ({m.max_tile_bytes[ipu] / m.tile_capacity_bytes:.0%}; "
        f"largest part {top}, {format_bytes(m.breakdown[ipu][top])} on the IPU); IPU{ipu} holds "
        f"{held}"
    )
    heaviest = max(units, key=lambda u: u.largest_param)
    tiles = get_target(problem.target).tiles
    tensor = heaviest.largest_param * (2 if last.config.half_weights else 4)
    share = tensor / tiles / m.tile_capacity_bytes
    if len(units) > 1 and share < TENSOR_SHARE:
        # Several units, none large: a longer pipeline than the space's would split them.
        longest = longest_replica(problem)
        grows = (
            ", which grow with the sequence and the micro-batch"
            if top in ("activations", "stash", "temporary")
            else ""
        )
        return (
            f"{said} ({len(units)} units): the space's longest pipeline is {longest} IPUs per "
            "replica, so they are not split further; the largest part of the IPU's memory is "
            f"{top}{grows}"
        )
    return (
        f"{said}, whose largest tensor ({heaviest.path}, {heaviest.largest_param:,} elements, "
        f"{format_bytes(tensor)} of weights) is {_kb(tensor / tiles)} on each of the IPU's "
        f"{tiles:,} tiles, {share:.0%} of a tile before its optimizer state, gradients and "
        "activations; a pipeline places whole tensors, so no split shrinks it"
    )


def _kb(n: float) -> str:
    """Tile-sized figures in kB, so that 1,160 kB and 639 kB compare at a glance."""
    return f"{n / 1e3:,.0f} kB"


# --- exact model state: parameters times bytes, no error bar ---------------------------------


def state_line(problem: Problem, config: Config) -> str:
    """The first line when nothing fits: the exact model state against the largest replica's
    SRAM, and the least of it any configuration keeps on chip."""
    from ..backends.estimate.memory import offloaded, sharded
    from ..backends.targets import get_target
    from ..profiles.trace import profile_for

    params = profile_for(problem).params
    state = model_state(problem, config, params)
    longest = longest_replica(problem)
    sram = longest * get_target(problem.target).bytes_per_ipu
    weights = "FP16" if config.half_weights else "FP32"
    where = (
        " (off chip in the closest configuration)"
        if offloaded(problem, config)
        else f" (sharded over {config.replicas} replicas in the closest configuration)"
        if sharded(problem, config)
        else ""
    )
    total = sum(state.values()) + (0 if state["gradients"] else state["weights"])
    least = least_on_chip(problem, params)
    gradients = (
        f"gradients {format_bytes(state['gradients'])}"
        if state["gradients"]
        else f"gradients {format_bytes(state['weights'])} ({weights}, each transient: "
        "none accumulated)"
    )
    return (
        f"model state (exact, parameters x bytes): {params:,} parameters, weights "
        f"{format_bytes(state['weights'])} ({weights}), {gradients}, {problem.optimizer} state "
        f"{format_bytes(state['optimizer'])}{where}: {format_bytes(total)} in all, against "
        f"{format_bytes(sram)} of SRAM on the space's largest replica ({longest} IPUs x "
        f"{format_bytes(get_target(problem.target).bytes_per_ipu)}); the weights alone, in the "
        f"narrowest precision, are {format_bytes(least)}, {least / sram:.0%} of it"
    )


def row_reason(before: PlanRow | None, row: PlanRow) -> str:
    """Why a row does not fit (the verdict's reason: over the tile, or a chance to fit under the
    one asked), is slower per IPU than the size before, has its busiest tile higher beyond the
    error bar of the size before, or speeds up more than the IPUs added; "" when none holds."""
    b = row.measurement
    out = [] if b.feasible or not b.reason else [b.reason]
    if before is None:
        return "; ".join(out)
    a = before.measurement
    if a.feasible and b.feasible and a.throughput and b.throughput:
        gain, more = b.throughput / a.throughput, row.ipus / before.ipus
        if gain < 0.99 * more and row.micro_batch != before.micro_batch:
            out.append(
                f"{gain:.2f}x the samples/s of {before.ipus} IPUs: micro-batch {row.micro_batch} "
                f"fits here (the largest up to the one asked), {before.micro_batch} at "
                f"{before.ipus} IPUs; {b.bottleneck or 'the step'} bounds it"
            )
        elif gain < 0.99 * more:
            if row.config == before.config or (
                row.config.replicas * row.config.ipus_per_replica < row.ipus
            ):
                used = row.config.replicas * row.config.ipus_per_replica
                out.append(
                    f"uses {used} of the {row.ipus} IPUs: {b.bottleneck or 'the step'} bounds it"
                    + (
                        " (more replicas would not be faster)"
                        if b.bottleneck == "host input"
                        else ""
                    )
                )
            else:
                out.append(
                    f"{gain:.2f}x the samples/s of {before.ipus} IPUs for {more:g}x the IPUs: "
                    f"{b.bottleneck or 'the step'} bounds it"
                )
        elif gain > 1.01 * more:
            why = (
                f"micro-batch {row.micro_batch} fits here ({before.micro_batch} at {before.ipus})"
                if row.micro_batch > before.micro_batch
                else f"a layout of {layout_text(row.config)} "
                f"(at {before.ipus}: {layout_text(before.config)}, bound by "
                f"{a.bottleneck or 'the step'})"
            )
            out.append(
                f"{gain:.2f}x the samples/s of {before.ipus} IPUs for {more:g}x the IPUs: {why}"
            )
    if a.max_tile_bytes and b.max_tile_bytes and a.max_tile_bytes_interval:
        hi = a.max_tile_bytes_interval[a.worst_ipu() or 0][1]
        if max(b.max_tile_bytes) > hi:
            out.append(
                f"busiest tile {tile_fraction(b):.0%}, above the "
                f"{hi / a.tile_capacity_bytes:.0%} top of {before.ipus} IPUs' error bar: "
                + (
                    "the faster configuration uses more of a tile, within its own bar"
                    if b.feasible
                    else f"the closest configuration is {layout_text(row.config)} at "
                    f"micro-batch {row.micro_batch}"
                )
            )
    return "; ".join(out)
