"""When nothing fits: what the closest trial lacks, and the texts of `plan`.

`plan` (study/planning.py: `tune`'s own search at each IPU count) and the exit-3 advice
(study/plan_advice.py) say things in the words below: the exact model state against the
SRAM it must fit in (`model_state`, `state_line`: parameters times bytes, no error bar), the
stage no split can shrink (`why_nothing_fits`), and why a row is slower per IPU or busier
than the size before (`row_reason`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..backends.base import Backend, Measurement, format_bytes
from ..problem import Config, Problem
from ..rules.cross_field import violations

if TYPE_CHECKING:
    from ..profiles.model_profile import Unit


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

#: the IPU counts a plan tries: IPU-POD4 to IPU-POD64 and one or two IPUs of a machine
SIZES = (1, 2, 4, 8, 16, 32, 64)
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
        f"at {last.ipus} IPUs (micro-batch {last.micro_batch}) the closest configuration's busiest tile, on "
        f"IPU{ipu}, needs {_kb(m.max_tile_bytes[ipu])} against a tile's "
        f"{_kb(m.tile_capacity_bytes)} ({m.max_tile_bytes[ipu] / m.tile_capacity_bytes:.0%}; "
        f"largest part {top}, {format_bytes(m.breakdown[ipu][top])} on the IPU); IPU{ipu} holds {held}"
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
            f"{said} ({len(units)} units): the space's longest pipeline is {longest} IPUs per replica, so "
            f"they are not split further; the largest part of the IPU's memory is {top}{grows}"
        )
    return (
        f"{said}, whose largest tensor ({heaviest.path}, {heaviest.largest_param:,} elements, "
        f"{format_bytes(tensor)} of weights) is {_kb(tensor / tiles)} on each of the IPU's {tiles:,} "
        f"tiles, {share:.0%} of a tile before its optimizer state, gradients and activations; a pipeline "
        "places whole tensors, so no split shrinks it"
    )


def _kb(n: float) -> str:
    """Tile-sized figures in kB, so that 1,160 kB and 639 kB compare at a glance."""
    return f"{n / 1e3:,.0f} kB"


# --- exact model state: parameters times bytes, no error bar ---------------------------------


def model_state(problem: Problem, config: Config, params: int) -> dict[str, float]:
    """Weights, gradient accumulators and optimizer state of the whole model in `config`'s
    types (backends/estimate/memory: the bytes per parameter the estimate itself uses)."""
    from ..backends.estimate.memory import accumulator_bytes_per_param, state_bytes_per_param

    return {
        "weights": params * (2.0 if config.half_weights else 4.0),
        "gradients": params * accumulator_bytes_per_param(problem, config),
        "optimizer": params * state_bytes_per_param(problem, config),
    }


def least_on_chip(problem: Problem, params: int) -> float:
    """A lower bound on the model state any configuration of the space keeps on one replica's
    IPUs: the weights in the narrowest precision the space allows. Gradients can be transient
    (sharded execution without accumulation) and optimizer state off chip or sharded, so
    neither is counted."""
    from ..search.space import SearchSpace

    precisions = getattr(SearchSpace.load(problem).knobs["precision"], "values", ("16.16",))
    narrowest = 2.0 if any(str(v).endswith(".16") for v in precisions) else 4.0
    return params * narrowest


def longest_replica(problem: Problem) -> int:
    """The most IPUs one replica spans in the space (a pipeline or sharded model)."""
    from ..profiles.trace import profile_for
    from ..search.space import SearchSpace

    sized = dataclasses.replace(problem, ipus=max(SIZES))
    return max(n for n, _ in SearchSpace.load(sized).ipu_layouts(sized, profile_for(sized)))


def certainly_over(problem: Problem, ipus: int) -> bool:
    """True when the exact weights alone exceed the SRAM of the largest replica `ipus` IPUs
    allow, or one weight tensor alone an IPU's: no configuration fits there, whatever the
    compiler decides."""
    return bool(certain_reason(problem, ipus))


def certain_reason(problem: Problem, ipus: int) -> str:
    """Why no configuration fits on `ipus` IPUs whatever the compiler decides, or "": the exact
    weights (narrowest precision) against the largest replica's SRAM, the largest weight
    tensor against one IPU's (a pipeline places whole tensors), or the least exact model state
    any split puts on one IPU of every layout the space allows (`least_on_one_ipu`)."""
    from ..backends.targets import get_target
    from ..profiles.trace import profile_for

    profile = profile_for(problem)
    ipu = get_target(problem.target).bytes_per_ipu
    narrowest = least_on_chip(problem, 1)  # bytes per parameter
    heaviest = max(profile.units, key=lambda u: u.largest_param, default=None)
    if heaviest is not None and narrowest * heaviest.largest_param > ipu:
        return (
            f"certain: one weight tensor ({heaviest.path}, {format_bytes(narrowest * heaviest.largest_param)}) "
            f"exceeds an IPU's {format_bytes(ipu)}"
        )
    replica = min(ipus, longest_replica(problem))
    weights = least_on_chip(problem, profile.params)
    if weights > replica * ipu:
        return (
            f"certain: the weights alone ({format_bytes(weights)}) exceed the {format_bytes(replica * ipu)} "
            f"of SRAM of the largest replica here ({replica} IPU{'s' if replica > 1 else ''})"
        )
    least = least_on_one_ipu(problem, ipus)
    if least is not None and least[0] > ipu:
        need, per_replica, replicas = least
        return (
            f"certain: any split of the model over {per_replica} IPUs per replica (x{replicas}, the least "
            f"the space allows here) leaves {format_bytes(need)} of exact model state on one IPU, over its "
            f"{format_bytes(ipu)} of SRAM (weights, accumulators a pipeline needs, and the largest weight's "
            "gradient and optimizer state at its update, offloaded and sharded where the space allows)"
        )
    return ""


def least_on_one_ipu(problem: Problem, ipus: int) -> tuple[float, int, int] | None:
    """(bytes, IPUs per replica, replicas): over every layout the space allows on `ipus` IPUs,
    the least exact model state the busiest IPU of a replica holds under any split the space
    can draw (profiles/refine.split_grid's units) and its cheapest settings; None when the
    space fixes its splits. Counted per IPU: its weights in the narrowest precision, gradient
    accumulators where every execution the space allows for it pipelines, and at the update of
    its largest weight that weight's gradient (without accumulators) and optimizer state (off
    chip and sharded where allowed: one tensor's state is loaded for its update; on chip, all
    of it). Activations, temporaries, code and exchange are not counted: a lower bound."""
    from ..backends.estimate.memory import state_bytes_per_param
    from ..knob_spec import has_optimizer_state, offload_applies
    from ..profiles.attribution import MIN_ELEMENTS_FOR_SHARDING
    from ..profiles.refine import split_grid
    from ..profiles.trace import profile_for
    from ..search.space import SearchSpace

    sized = dataclasses.replace(problem, ipus=ipus)
    profile, space = profile_for(sized), SearchSpace.load(sized)

    def allowed(knob: str) -> tuple[Any, ...]:
        return tuple(getattr(space.knobs[knob], "values", ()) or ())

    if allowed("splits") and allowed("splits")[0] != "search":
        return None
    w = least_on_chip(problem, 1)
    half_state = "half" in allowed("optimizer_state") or not allowed("optimizer_state")
    cheapest = Config(
        precision="16.16" if w == 2.0 else "32.32",
        optimizer_state="half" if half_state else "float",
    )
    stateful = has_optimizer_state(problem)
    state = state_bytes_per_param(problem, cheapest)
    offload = (
        stateful
        and offload_applies(problem)
        and (True in allowed("optimizer_offload") or not allowed("optimizer_offload"))
    )
    rts_ok = stateful and (
        True in allowed("replicated_tensor_sharding") or not allowed("replicated_tensor_sharding")
    )
    # the tied head shares its embedding's weight: left out, which only lowers the bound
    units = [u for u in split_grid(profile).units if u.placed_with is None]
    best: tuple[float, int, int] | None = None
    for per_replica, replicas in space.ipu_layouts(sized, profile):
        pipelines = per_replica > 1 and set(allowed("execution") or ("pipelined",)) == {
            "pipelined"
        }
        accumulators = (2.0 if half_state else 4.0) if pipelines and stateful else 0.0
        shards = replicas if rts_ok and replicas > 1 else 1

        def cost(
            params: int,
            largest: int,
            unshardable: int,
            accumulators: float = accumulators,
            shards: int = shards,
        ) -> float:
            gradient = 0.0 if accumulators else largest * w
            if not stateful:
                on_chip = 0.0  # SGD combined: its one tensor is the weight's own bytes, counted
            else:
                whole = ((params - unshardable) / shards + unshardable) * state
                piece = (
                    (largest - 1) // shards + 1
                    if largest >= MIN_ELEMENTS_FOR_SHARDING
                    else largest
                ) * state
                on_chip = min(whole, piece) if offload else whole
            return params * (w + accumulators) + gradient + on_chip

        need = _min_max_split(units, per_replica, cost)
        if best is None or need < best[0]:
            best = (need, per_replica, replicas)
    return best


def _min_max_split(units: list[Unit], parts: int, cost: Callable[[int, int, int], float]) -> float:
    """The least, over splits of `units` into at most `parts` runs in order, of the largest
    run's cost (cost grows as a run takes more units): a binary search on that cost, each
    guess checked by filling runs greedily."""

    def runs_needed(limit: float) -> int:
        runs, params, largest, unshardable = 1, 0, 0, 0
        for u in units:
            p, lg, un = (
                params + u.params,
                max(largest, u.largest_param),
                unshardable + u.unshardable_params,
            )
            if cost(p, lg, un) > limit:
                runs, p, lg, un = runs + 1, u.params, u.largest_param, u.unshardable_params
                if cost(p, lg, un) > limit:
                    return parts + 1
            params, largest, unshardable = p, lg, un
        return runs

    low = max((cost(u.params, u.largest_param, u.unshardable_params) for u in units), default=0.0)
    high = cost(
        sum(u.params for u in units),
        max((u.largest_param for u in units), default=0),
        sum(u.unshardable_params for u in units),
    )
    while high - low > max(1.0, 1e-6 * high):
        mid = (low + high) / 2
        low, high = (low, mid) if runs_needed(mid) <= parts else (mid, high)
    return high


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
        else f"gradients {format_bytes(state['weights'])} ({weights}, each transient: none accumulated)"
    )
    return (
        f"model state (exact, parameters x bytes): {params:,} parameters, weights {format_bytes(state['weights'])} "
        f"({weights}), {gradients}, {problem.optimizer} state "
        f"{format_bytes(state['optimizer'])}{where}: {format_bytes(total)} in all, against "
        f"{format_bytes(sram)} of SRAM on the space's largest replica ({longest} IPUs x "
        f"{format_bytes(get_target(problem.target).bytes_per_ipu)}); the weights alone, in the narrowest "
        f"precision, are {format_bytes(least)}, {least / sram:.0%} of it"
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
                f"{gain:.2f}x the samples/s of {before.ipus} IPUs: micro-batch {row.micro_batch} fits here "
                f"(the largest up to the one asked), {before.micro_batch} at {before.ipus} IPUs; "
                f"{b.bottleneck or 'the step'} bounds it"
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
                f"(at {before.ipus}: {layout_text(before.config)}, bound by {a.bottleneck or 'the step'})"
            )
            out.append(
                f"{gain:.2f}x the samples/s of {before.ipus} IPUs for {more:g}x the IPUs: {why}"
            )
    if a.max_tile_bytes and b.max_tile_bytes and a.max_tile_bytes_interval:
        hi = a.max_tile_bytes_interval[a.worst_ipu() or 0][1]
        if max(b.max_tile_bytes) > hi:
            out.append(
                f"busiest tile {tile_fraction(b):.0%}, above the {hi / a.tile_capacity_bytes:.0%} top of "
                f"{before.ipus} IPUs' error bar: "
                + (
                    "the faster configuration uses more of a tile, within its own bar"
                    if b.feasible
                    else f"the closest configuration is {layout_text(row.config)} at micro-batch {row.micro_batch}"
                )
            )
    return "; ".join(out)
