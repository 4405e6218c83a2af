"""Where a split or a recomputation checkpoint lands among the traced units.

A split begins a pipeline stage where its module first runs (`poptorch.BeginBlock`); the
estimator's stages are runs of whole units, so a split must begin a unit: the unit's own
module, or a container entered just before it (`layer3` begins at `layer3.0`). A split
inside a unit (GPT-2's `transformer.wpe`, folded into the embedding unit) has no stage the
estimator could build, and the rules refuse it.

A checkpoint keeps a module's output; the estimator keeps units' outputs, so it must be a
unit, the module folded last into one (ResNet's `avgpool`), or a container, whose output is
its last unit's.
"""

from __future__ import annotations

from collections.abc import Sequence

from .trace import ModelProfile


def stage_start(profile: ModelProfile, path: str) -> int | None:
    """The unit a stage beginning at `path` starts with, or None inside a unit."""
    units = profile.units
    for i, unit in enumerate(units):
        if unit.path == path:
            return i
    position = {p: i for i, p in enumerate(profile.module_order)}
    q = position.get(path)
    if q is None:
        return None
    starts = sorted((position[u.path], i) for i, u in enumerate(units) if u.path in position)
    for start, i in starts:
        if start >= q:
            # Only containers of the unit may run between the split and the unit's start.
            entered = profile.module_order[q:start]
            inside = all(m == "" or units[i].path.startswith(m + ".") for m in entered)
            return i if inside else None
    return None


def stage_starts(profile: ModelProfile, splits: Sequence[str]) -> list[int] | None:
    """The units the splits start stages at, or None when one of them cannot be placed."""
    found = [stage_start(profile, p) for p in splits]
    return None if any(i is None for i in found) else found


def checkpoint_unit(profile: ModelProfile, path: str) -> int | None:
    """The unit whose output a checkpoint at `path` keeps, or None inside a unit."""
    last_inside = None
    for i, unit in enumerate(profile.units):
        if unit.path == path or (unit.members and unit.members[-1] == path):
            return i
        if path == "" or unit.path.startswith(path + "."):
            last_inside = i
    return last_inside
