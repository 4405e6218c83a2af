"""Single-knob changes of a configuration within the space: every move the climbs and the
guide take from a config (a few knobs move with a partner: recomputation with its
checkpoints, a layout with its accumulation)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..batch import micro_batch
from ..knob_spec import SPEC
from ..models import partition
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..profiles.placement import stage_starts
from ..rules.cross_field import min_pipeline_accumulation
from ..search.replay import checkpoint_spacing, with_splits
from ..search.space import Choice, Range, SearchSpace, checkpoints_every
from .balanced_splits import balanced_splits, split_units


def single_changes(
    space: SearchSpace, problem: Problem, profile: ModelProfile, config: Config
) -> Iterator[tuple[str, Config]]:
    """Single-knob changes of `config` within the space (and a few that need a partner)."""

    def values(name: str) -> list[Any]:
        knob = space.knobs.get(name)
        if isinstance(knob, Choice):
            return list(knob.values)
        if isinstance(knob, Range):
            if knob.integer:
                v, out = max(1, int(knob.low)), []
                while v <= knob.high:
                    out.append(v)
                    v *= 2
                return out
            return [
                round(knob.low + i * (knob.step or 0.05), 4)
                for i in range(0, 40)
                if knob.low + i * (knob.step or 0.05) <= knob.high + 1e-9
            ][::3]
        return []

    c = config
    guide_moves = {
        "execution": _execution_moves,
        "recompute": _recompute_moves,
        "splits": _split_moves,
        "ipus_per_replica": _layout_moves,
    }
    for knob in SPEC:
        if knob.name in guide_moves:
            for moved in guide_moves[knob.name](space, problem, profile, c, values):
                yield knob.name, moved
        elif knob.moves is not None and knob.applies_to(problem, c):
            for moved in knob.moves(problem, c, values(knob.name)):
                yield knob.name, moved


# The layout knobs' moves need the profile and the space: the guide's own.


def _execution_moves(
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    c: Config,
    values: Callable[[str], list[Any]],
) -> Iterator[Config]:
    if c.ipus_per_replica > 1:
        least = min_pipeline_accumulation(problem, c.ipus_per_replica)
        for execution in values("execution"):
            if execution != c.execution and (
                execution != "pipelined"
                or not problem.global_batch
                or c.gradient_accumulation >= least
            ):
                accumulation = (
                    c.gradient_accumulation
                    if execution == "sharded" or problem.global_batch
                    else max(c.gradient_accumulation, least)
                )
                yield c.replace(
                    execution=execution,
                    recompute="default",
                    checkpoints=(),
                    io_tiles=0,
                    gradient_accumulation=accumulation,
                )


def _recompute_moves(
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    c: Config,
    values: Callable[[str], list[Any]],
) -> Iterator[Config]:
    # Recomputation and its checkpoints move together: one without the other rarely helps.
    for r in values("recompute"):
        if r == "pipeline" and not c.pipelined:
            continue
        moved = c.replace(recompute=r, checkpoints=())
        if moved.effective_recompute in ("pipeline", "all"):
            for every in values("checkpoint_every"):
                candidate = moved.replace(checkpoints=checkpoints_every(profile, c.splits, every))
                if candidate != c:
                    yield candidate
        elif moved != c:
            yield moved


def _split_moves(
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    c: Config,
    values: Callable[[str], list[Any]],
) -> Iterator[Config]:
    if c.ipus_per_replica > 1:
        every = checkpoint_spacing(profile, c) if c.checkpoints else None
        for kind in ("memory", "compute"):
            yield with_splits(profile, c, balanced_splits(problem, profile, c, kind), every)
        grid = split_units(problem, profile)
        starts = stage_starts(grid, c.splits)
        if starts is not None:
            for moved in partition.moved_cuts(starts, len(grid.units), (-4, -2, -1, 1, 2, 4)):
                yield with_splits(profile, c, tuple(grid.units[i].path for i in moved), every)


def _layout_moves(
    space: SearchSpace,
    problem: Problem,
    profile: ModelProfile,
    c: Config,
    values: Callable[[str], list[Any]],
) -> Iterator[Config]:
    for ipr, replicas in space.ipu_layouts(problem, profile):
        if (ipr, replicas) == (c.ipus_per_replica, c.replicas):
            continue
        accumulation = c.gradient_accumulation
        if problem.global_batch:
            accumulation = problem.global_batch // (
                micro_batch(problem, c) * replicas
            )  # the rules judge a remainder
        elif ipr > 1:
            accumulation = max(accumulation, min_pipeline_accumulation(problem, ipr))
        moved = c.replace(
            ipus_per_replica=ipr,
            replicas=replicas,
            available_memory_proportion=(),
            gradient_accumulation=accumulation,
            replicated_tensor_sharding=False,
            checkpoints=(),
            recompute="default",
            splits=(),
            io_tiles=0,
            execution="pipelined"
            if ipr > 1 and accumulation >= min_pipeline_accumulation(problem, ipr)
            else ("sharded" if ipr > 1 else c.execution),
        )
        if ipr > 1:
            moved = moved.replace(splits=balanced_splits(problem, profile, moved, "memory"))
        yield moved
