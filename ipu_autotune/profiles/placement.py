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

from ..problem import Config
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


def unit_of_path(profile: ModelProfile, path: str) -> int:
    """Unit index a split at `path` begins (models/placement.py). A path inside a unit, which
    the rules refuse, rounds to the unit's start: the backend never raises on a config."""
    idx = stage_start(profile, path)
    if idx is None:
        idx = profile.unit_index(path)
    if idx is not None:
        return idx
    position = {p: i for i, p in enumerate(profile.module_order)}
    q = position.get(path)
    if q is None:
        return 0
    starts = [position.get(u.path, 0) for u in profile.units]
    best = 0
    for i, s in enumerate(starts):
        if s <= q:
            best = i
    return best


def stage_bounds(profile: ModelProfile, config: Config) -> list[tuple[int, int]]:
    n = len(profile.units)
    cuts = [0] + [unit_of_path(profile, s) for s in config.splits] + [n]
    return [(cuts[k], max(cuts[k], cuts[k + 1])) for k in range(len(cuts) - 1)]


def checkpoints_every(profile: ModelProfile, splits: tuple[str, ...], every: int) -> tuple[str, ...]:
    """Checkpoint the output of every `every`-th unit inside each stage (not a stage's last)."""
    if every <= 0:
        return ()
    # Splits the rules refuse (inside a unit) cannot bound a stage: checkpoint as if unsplit.
    bounds = [0, *(stage_starts(profile, splits) or ()), len(profile.units)]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        for i in range(lo + every - 1, hi - 1, every):
            out.append(profile.units[i].path)
    return tuple(out)


def is_layer(path: str) -> bool:
    """A repeated transformer layer ("bert.encoder.layer.3", "transformer.h.11"): what
    IPUConfig's layers_per_ipu counts and recompute_checkpoint_every_layer checkpoints."""
    return path.rsplit(".", 1)[-1].isdigit()


def optimum_checkpoints(profile: ModelProfile) -> tuple[str, ...]:
    """`recompute_checkpoint_every_layer = true` as optimum-graphcore's parallelize() applies it:
    a `recomputation_checkpoint` on every layer its loops reach, whatever IPU the layer is on (a
    stage's last layer too), less those the model's class skips (profiles/optimum_placement.py,
    `SKIPPED_INDEX`, `unchecked_layers`: the layer at `index == config.<count> - 1` in each of
    its parallelize()'s layer loops, e.g. BertPipelineMixin's last layer, DistilBERT's and
    DeBERTa's last layer for MLM too, BART's and T5's encoder count - 1 in both stacks; none for
    PipelinedBertForMaskedLM, RoBERTa MLM, GPT-2 LM and ViT). The stages do not change them."""
    from .optimum_placement import unchecked_layers

    layers = [u.path for u in profile.units if is_layer(u.path)]
    skip = unchecked_layers(profile, layers)
    return tuple(p for p in layers if p not in skip)


def head_runs(p) -> list[tuple[str, str | None]]:
    """hf: models: each run of units placed back on IPU0 with the embedding (a tied head; under
    --trainer optimum whatever the pipelined class pins there, profiles/optimum_placement.ON_IPU0)
    as (its first unit, the unit after it or None at the end)."""
    if not p.token_inputs:
        return []
    from .trace import profile_for

    units = profile_for(p).units
    out = []
    for i, u in enumerate(units):
        if u.placed_with == 0 and (i == 0 or units[i - 1].placed_with != 0):
            out.append((u.path, next((v.path for v in units[i + 1:] if v.placed_with != 0), None)))
    return out


def head_blocks(p, config: Config) -> list[tuple[str, int]]:
    """(module, IPU) of each BeginBlock the pipelined snippet adds for head_runs: the run's first
    unit on IPU0 and, for a run between layers (BART's decoder position embedding under
    --trainer optimum), the unit after it back on its own stage's IPU unless a split begins it."""
    from .trace import profile_for

    out: list[tuple[str, int]] = []
    for first, after in head_runs(p):
        out.append((first, 0))
        if after is not None and after not in config.splits:
            profile = profile_for(p)
            i = profile.unit_index(after)
            out.append((after, next(k for k, (lo, hi) in enumerate(stage_bounds(profile, config)) if lo <= i < hi)))
    return out
