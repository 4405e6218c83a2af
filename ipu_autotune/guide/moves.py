"""Single changes of a configuration that warmstart's climb leaves out, worth a compile once
the estimator is corrected by compiles (guide/corrected.CorrectedScreen adds them): finer steps
of a knob, and a pipeline's stage boundaries moved together."""

from __future__ import annotations

from ..models import partition
from ..problem import Config
from ..profiles.model_profile import ModelProfile
from ..search.replay import checkpoint_spacing, with_splits
from ..search.space import Range, SearchSpace


def finer_changes(space: SearchSpace, c: Config) -> list[Config]:
    """Single changes warmstart's climb leaves out, worth a compile once the model is
    corrected: I/O tiles (not pipelined, as the space samples them), every available
    memory proportion step, and one IPU's proportion a step up or down."""
    out = []
    tiles = space.knobs.get("io_tiles")
    if tiles is not None and not c.pipelined:
        out += [c.replace(io_tiles=t, execution="sharded" if t else c.execution)
                for t in getattr(tiles, "values", ()) if t != c.io_tiles]
    amp = space.knobs.get("available_memory_proportion")
    step = getattr(amp, "step", None)
    if isinstance(amp, Range) and step:  # a Choice has no step
        n = int((amp.high - amp.low) / step + 1e-9)
        out += [c.replace(available_memory_proportion=(round(amp.low + i * step, 4),) * c.ipus_per_replica)
                for i in range(n + 1)]
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
        return [c.replace(splits=tuple(profile.units[x].path for x in moved))
                for moved in partition.shifted_cuts(cuts, units, steps)]
    every = checkpoint_spacing(profile, c)
    if every is None:
        return []
    out = []
    for moved in partition.moved_cuts(cuts, units, steps) + partition.shifted_cuts(cuts, units, steps):
        splits = tuple(profile.units[x].path for x in moved)
        out.append(with_splits(profile, c, splits, every))
    return out
