"""Where a split or a recomputation checkpoint lands among the traced units.

A split begins a pipeline stage where its module first runs (`poptorch.BeginBlock`). A
split that begins a unit starts the stage there: the unit's own module, or a container
entered just before it (`layer3` begins at `layer3.0`). A split inside a unit (an MBConv's
`block.3`, GPT-2's `transformer.wpe`, folded into the embedding unit) cuts that unit in two
(profiles/refine.py): the estimator's stages are runs of units of the profile so refined.

A checkpoint keeps a module's output: a unit, the module folded last into one (ResNet's
`avgpool`), or a container, whose output is its last unit's; one inside a unit cuts it
where the module returns (profiles/refine.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from ..problem import Config, Problem
from .model_profile import ModelProfile

# checkpoint_unit and stage_start are placement's names too (re-exported: `X as X`)
from .refine import checkpoint_unit as checkpoint_unit, refined, stage_start as stage_start


def stage_starts(profile: ModelProfile, splits: Sequence[str]) -> list[int] | None:
    """The units the splits start stages at, or None when one of them cannot be placed."""
    found = [i for p in splits if (i := stage_start(profile, p)) is not None]
    return found if len(found) == len(splits) else None


def unit_of_path(profile: ModelProfile, path: str) -> int:
    """Unit index a split at `path` begins. On a profile not refined for it (refine.py), a path
    inside a unit rounds to the unit's start: the backend never raises on a config."""
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


def checkpoints_every(
    profile: ModelProfile, splits: tuple[str, ...], every: int
) -> tuple[str, ...]:
    """Checkpoint the output of every `every`-th unit inside each stage (not a stage's last);
    a split inside a unit cuts it first (refine.py), so a stage begins with that piece."""
    if every <= 0:
        return ()
    fine = refined(profile, splits)
    # A split that does not run (the rules refuse it) bounds no stage: checkpoint as if unsplit.
    bounds = [0, *(stage_starts(fine, splits) or ()), len(fine.units)]
    out = []
    for lo, hi in pairwise(bounds):
        for i in range(lo + every - 1, hi - 1, every):
            out.append(fine.units[i].path)
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


def head_runs(p: Problem) -> list[tuple[str, str | None]]:
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
            out.append(
                (u.path, next((v.path for v in units[i + 1 :] if v.placed_with != 0), None))
            )
    return out


def head_blocks(p: Problem, config: Config) -> list[tuple[str, int]]:
    """(module, IPU) of each BeginBlock the pipelined snippet adds for head_runs: the run's first
    unit on IPU0 and, for a run between layers (BART's decoder position embedding under
    --trainer optimum), the unit after it back on its own stage's IPU unless a split begins it."""
    out: list[tuple[str, int]] = []
    for first, after in head_runs(p):
        out.append((first, 0))
        if after is not None and after not in config.splits:
            from .trace import profile_for  # torch, only for the models that have such runs

            profile = profile_for(p)
            i = profile.unit_index(after)
            assert i is not None  # head_runs names units of this profile
            out.append(
                (
                    after,
                    next(
                        k
                        for k, (lo, hi) in enumerate(stage_bounds(profile, config))
                        if lo <= i < hi
                    ),
                )
            )
    return out
