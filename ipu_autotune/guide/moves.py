"""Changes of a configuration that warmstart's climb leaves out, worth a compile once the
estimator is corrected by compiles: finer steps of a knob and a pipeline's stage boundaries
moved together (guide/corrected_screen.CorrectedScreen adds them), and random combinations of
single changes (the guide gathers them around its anchors)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ..models import partition
from ..problem import Config
from ..profiles.model_profile import ModelProfile
from ..search.replay import checkpoint_spacing, with_splits
from ..search.space import Range, SearchSpace
from .pairs import changes


def finer_changes(space: SearchSpace, c: Config) -> list[Config]:
    """Single changes warmstart's climb leaves out, worth a compile once the model is
    corrected: I/O tiles (not pipelined, as the space samples them), every available
    memory proportion step, and one IPU's proportion a step up or down."""
    out = []
    tiles = space.knobs.get("io_tiles")
    if tiles is not None and not c.pipelined:
        out += [
            c.replace(io_tiles=t, execution="sharded" if t else c.execution)
            for t in getattr(tiles, "values", ())
            if t != c.io_tiles
        ]
    amp = space.knobs.get("available_memory_proportion")
    step = getattr(amp, "step", None)
    if isinstance(amp, Range) and step:  # a Choice has no step
        n = int((amp.high - amp.low) / step + 1e-9)
        out += [
            c.replace(
                available_memory_proportion=(round(amp.low + i * step, 4),) * c.ipus_per_replica
            )
            for i in range(n + 1)
        ]
        for i, a in enumerate(c.available_memory_proportion):
            for v in (round(a - step, 4), round(a + step, 4)):
                if amp.low - 1e-9 <= v <= amp.high + 1e-9:
                    amps = list(c.available_memory_proportion)
                    amps[i] = v
                    out.append(c.replace(available_memory_proportion=tuple(amps)))
    return [x for x in out if x != c]


def split_moves(profile: ModelProfile, c: Config) -> list[Config]:
    """Stage boundaries moved by one or two units, each alone and all together, with the
    checkpoints re-derived for the new stages (search.replay.with_splits, as warmstart's
    moves do). All together: a pipeline whose first stage holds more than the estimate
    says (a transformer's embeddings, say) fits when every boundary moves a layer earlier,
    while each single move overloads a middle stage, so no climb of single moves gets there."""
    index = {u.path: i for i, u in enumerate(profile.units)}
    if not c.splits or not all(p in index for p in c.splits):
        return []
    cuts, steps, units = [index[p] for p in c.splits], (-2, -1, 1, 2), len(profile.units)
    if not c.checkpoints:  # warmstart's moves have each boundary alone
        return [
            c.replace(splits=tuple(profile.units[x].path for x in moved))
            for moved in partition.shifted_cuts(cuts, units, steps)
        ]
    every = checkpoint_spacing(profile, c)
    if every is None:
        return []
    out = []
    for moved in partition.moved_cuts(cuts, units, steps) + partition.shifted_cuts(
        cuts, units, steps
    ):
        splits = tuple(profile.units[x].path for x in moved)
        out.append(with_splits(profile, c, splits, every))
    return out


def combined_changes(
    base: Config, singles: Sequence[Config], rng: random.Random, count: int
) -> list[Config]:
    """`count` random combinations of two or three of `singles` (single-knob changes of
    `base`) that change different knobs: configurations in a combination of knob values no
    climb reaches, since each of its single changes alone is no better. On an IPU nobody
    modelled such a combination can be off as a whole (guide/knob_effects.py's interactions):
    drawn at random, not by the estimate, so a region the estimator ranks low is reached too."""
    by_knobs: dict[frozenset[str], list[Config]] = {}
    for c in singles:
        by_knobs.setdefault(frozenset(changes(base, c)), []).append(c)
    groups = list(by_knobs.values())
    out: list[Config] = []
    for _ in range(count if len(groups) >= 2 else 0):
        picked = [rng.choice(g) for g in rng.sample(groups, min(rng.choice((2, 3)), len(groups)))]
        moved: dict[str, Any] = {}
        for c in picked:
            delta = changes(base, c)
            if delta.keys() & moved.keys():
                break
            moved.update(delta)
        else:
            out.append(base.replace(**moved))
    return out
