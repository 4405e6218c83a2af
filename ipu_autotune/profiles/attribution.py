"""A traced forward's log attributed to units as `poptorch.BeginBlock` assigns ops to stages.

Plain Python over a TraceLog (no torch): profiles/trace.py attributes a new trace, and
profiles/refine.py attributes it again with more cuts, in processes that never import torch.
"""

from __future__ import annotations

from .model_profile import TraceLog, Unit

#: PopART's TensorLocationSettings default minElementsForReplicatedTensorSharding (PopTorch
#: keeps it): smaller tensors are not sharded (popart willow/src/transforms/
#: streamingmemoryopinserter.cpp, determineTensorLocation).
MIN_ELEMENTS_FOR_SHARDING = 8192


def attribute(log: TraceLog, cuts: dict[int, str] | None = None) -> list[Unit]:
    """The logged ops, saved tensors and parameters attributed to units as BeginBlock assigns
    them: from a unit's start module (each time it is entered) up to the next unit. `cuts`
    (event index -> unit path) begins more units at those events, inside others
    (profiles/refine.py); their `in_bytes` are left for the caller, who knows what crosses."""
    cuts = cuts or {}
    start_set, candidates = set(log.starts), log.candidates
    first_enter: dict[str, int] = {}
    for i, event in enumerate(log.events):
        if event[0] == "enter":
            first_enter.setdefault(event[1], i)
    begins = sorted([(first_enter[p], p) for p in log.starts] + [(i, p) for i, p in cuts.items()])
    units = [Unit(path=p) for _, p in begins]
    unit_of_start = {p: k for k, (_, p) in enumerate(begins) if p in start_set}
    unit_of_cut = {i: k for k, (i, p) in enumerate(begins) if i in cuts}
    current = 0
    owner: dict[str, int] = {}
    param_unit: dict[int, int] = {}  # parameter storage -> unit that reads it first
    previous_inputs: dict[int, int] = {}  # storages entering the unit before, and their bytes
    for index, event in enumerate(log.events):
        if index in unit_of_cut:
            current = unit_of_cut[index]
        if event[0] == "enter":
            path = event[1]
            if path in start_set:
                current = unit_of_start[path]
                if not units[current].in_bytes:
                    units[current].in_bytes = event[2]
                    entering = event[3]
                    units[current].carried_in_bytes = sum(
                        n for key, n in entering.items() if key in previous_inputs
                    )
                    previous_inputs = entering
            if path not in owner:
                owner[path] = current
                if path not in start_set and path in candidates:
                    units[current].members.append(path)
        elif event[0] == "param":
            first = param_unit.setdefault(event[1], current)
            if first != current and units[current].placed_with is None:
                units[current].placed_with = first
        elif event[0] == "op":
            _, kind, flops, out_bytes, in_bytes = event
            unit = units[current]
            unit.ops += 1
            unit.flops[kind] += flops
            if kind in ("conv", "matmul"):
                unit.max_op_bytes = max(unit.max_op_bytes, in_bytes + out_bytes)
            else:
                unit.light_bytes += out_bytes
        elif event[0] == "saved":
            _, kind, nbytes = event
            if kind in ("conv", "matmul"):
                units[current].saved_heavy_bytes += nbytes
            else:
                units[current].saved_light_bytes += nbytes

    _charge_parameters(log.params, units, owner, param_unit)
    for unit in units:
        unit.flops = dict(unit.flops)
    return units


def _charge_parameters(
    params: tuple[tuple[str, int, int], ...],
    units: list[Unit],
    owner: dict[str, int],
    param_unit: dict[int, int],
) -> None:
    """Each trainable parameter once, to the unit whose ops read it first; a parameter the
    forward never reads goes with its module."""
    for path, key, numel in params:
        unit = units[param_unit.get(key, owner.get(path, 0))]
        unit.params += numel
        unit.param_tensors += 1
        unit.largest_param = max(unit.largest_param, numel)
        if numel < MIN_ELEMENTS_FOR_SHARDING:
            unit.unshardable_params += numel
