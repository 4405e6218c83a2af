"""What no compiler decision can shrink: the least on-chip memory a model's parameters and
optimizer state need in any layout of a given number of IPUs (parameters times bytes, no
error bar), so that `plan` can say a size certainly cannot fit (guide/nofit.py words it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..measurement import format_bytes
from ..problem import Config, Problem

if TYPE_CHECKING:
    from ..profiles.model_profile import Unit

#: the IPU counts a plan tries: IPU-POD4 to IPU-POD64 and one or two IPUs of a machine
SIZES = (1, 2, 4, 8, 16, 32, 64)


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
            f"certain: one weight tensor ({heaviest.path}, "
            f"{format_bytes(narrowest * heaviest.largest_param)}) exceeds an IPU's "
            f"{format_bytes(ipu)}"
        )
    replica = min(ipus, longest_replica(problem))
    weights = least_on_chip(problem, profile.params)
    if weights > replica * ipu:
        return (
            f"certain: the weights alone ({format_bytes(weights)}) exceed the "
            f"{format_bytes(replica * ipu)} of SRAM of the largest replica here ({replica} "
            f"IPU{'s' if replica > 1 else ''})"
        )
    least = least_on_one_ipu(problem, ipus)
    if least is not None and least[0] > ipu:
        need, per_replica, replicas = least
        return (
            f"certain: any split of the model over {per_replica} IPUs per replica (x{replicas}, "
            f"the least the space allows here) leaves {format_bytes(need)} of exact model state "
            f"on one IPU, over its {format_bytes(ipu)} of SRAM (weights, accumulators a pipeline "
            "needs, and the largest weight's gradient and optimizer state at its update, "
            "offloaded and sharded where the space allows)"
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
