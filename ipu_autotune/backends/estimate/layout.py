"""Where each unit of the model runs: stages from split points, per-stage sums.

Plain functions over per-unit costs, like torchgpipe's balance: the memory and time models
both read the same Stage records.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...problem import Config
from ...profiles.model_profile import ModelProfile
from ...profiles.placement import checkpoint_unit, stage_bounds, unit_of_path
from ...profiles.refine import refined


@dataclass(frozen=True)
class Stage:
    index: int
    first: int  # unit index range [first, last)
    last: int
    params: int
    largest_param: int
    unshardable_params: int  # in tensors below PopART's sharding threshold
    param_tensors: int  # trainable tensors: the weight update's ops run once per tensor
    in_bytes: int  # FP32 bytes that cross into the stage per micro-batch
    saved: int  # FP32 bytes saved for backward per micro-batch
    saved_heavy: int
    saved_light: int
    light_bytes: int
    heavy_flops: float  # conv + matmul forward FLOPs per micro-batch
    other_flops: float
    ops: int
    max_op_bytes: int
    checkpoint_bytes: int  # FP32 outputs of checkpointed units in the stage
    max_segment_saved: int  # FP32 saved bytes of the largest run between checkpoints
    out_bytes: int  # what leaves the stage (next stage's input)
    # Tied heads run here after the last IPU (GPT-2's lm_head back on IPU0): each is a
    # pipeline stage of its own, forward and backward in one cycle, so nothing of it is stashed.
    returning_heads: int = 0
    head_saved: int = 0  # FP32 saved bytes of those heads, per micro-batch
    # Times the stage's own units resume after a unit placed elsewhere ran between them (BART's
    # decoder position embedding on IPU0 under --trainer optimum, between encoder and decoder
    # layers on one IPU): each resumption is a pipeline stage too.
    reentries: int = 0


def _checkpointed(profile: ModelProfile, path: str) -> int:
    found = checkpoint_unit(profile, path)
    return found if found is not None else unit_of_path(profile, path)


def unit_output_bytes(profile: ModelProfile, i: int) -> int:
    units = profile.units
    if i + 1 < len(units):
        return units[i + 1].in_bytes
    return profile.batch_size * profile.num_classes * 4


def unit_produced_bytes(profile: ModelProfile, i: int) -> int:
    """What unit i itself produces for the next unit: what a recomputation checkpoint on it
    keeps. Inputs passed along unchanged (an attention mask) are not its output."""
    units = profile.units
    if i + 1 < len(units):
        return units[i + 1].in_bytes - units[i + 1].carried_in_bytes
    return unit_output_bytes(profile, i)


def stage_members(profile: ModelProfile, config: Config) -> list[list[int]]:
    """Unit indices per stage: the contiguous ranges the splits make, with tied heads moved
    to the stage of the unit whose weights they read (`Unit.placed_with`); units cut where a
    split lands inside one (profiles/refine.py)."""
    profile = refined(profile, config.splits, config.checkpoints)
    bounds = stage_bounds(profile, config)
    stage_of = {i: k for k, (lo, hi) in enumerate(bounds) for i in range(lo, hi)}
    members: list[list[int]] = [[] for _ in bounds]
    for i, unit in enumerate(profile.units):
        home = unit.placed_with if unit.placed_with is not None else i
        if i in stage_of:
            members[stage_of.get(home, stage_of[i])].append(i)
    return members


def stages(profile: ModelProfile, config: Config) -> list[Stage]:
    """Per-stage sums over the units, cut first where a split or checkpoint lands inside one."""
    profile = refined(profile, config.splits, config.checkpoints)
    units = profile.units
    ckpt_units = {_checkpointed(profile, p) for p in config.checkpoints}
    out: list[Stage] = []
    bounds = stage_bounds(profile, config)
    for k, ((lo, hi), indices) in enumerate(
        zip(bounds, stage_members(profile, config), strict=True)
    ):
        members = [units[i] for i in indices]
        segment = best_segment = 0
        checkpoint_bytes = 0
        for i in indices:
            segment += units[i].saved_bytes
            if i in ckpt_units:
                # every tensor the checkpoint keeps (under --trainer optimum, GPT-2's key and
                # value too)
                checkpoint_bytes += unit_produced_bytes(profile, i) * units[i].checkpointed_outputs
                best_segment = max(best_segment, segment)
                segment = 0
        best_segment = max(best_segment, segment)
        moved_in = [i for i in indices if not lo <= i < hi]  # a tied head's input crosses back
        own = [i in indices for i in range(lo, hi)]
        reentries = sum(
            1 for j in range(1, len(own)) if own[j] and not own[j - 1] and any(own[:j])
        )
        out.append(
            Stage(
                index=k,
                first=lo,
                last=hi,
                params=sum(u.params for u in members),
                largest_param=max((u.largest_param for u in members), default=0),
                unshardable_params=sum(u.unshardable_params for u in members),
                param_tensors=sum(u.param_tensors for u in members),
                in_bytes=(
                    profile.input_bytes
                    if lo == 0
                    else units[lo].in_bytes
                    if lo < len(units)
                    else 0
                )
                + sum(units[i].in_bytes for i in moved_in),
                saved=sum(u.saved_bytes for u in members),
                saved_heavy=sum(u.saved_heavy_bytes for u in members),
                saved_light=sum(u.saved_light_bytes for u in members),
                light_bytes=sum(u.light_bytes for u in members),
                heavy_flops=sum(
                    u.flops.get("conv", 0.0) + u.flops.get("matmul", 0.0) for u in members
                ),
                other_flops=sum(
                    u.flops.get("norm", 0.0) + u.flops.get("other", 0.0) for u in members
                ),
                ops=sum(u.ops for u in members),
                max_op_bytes=max((u.max_op_bytes for u in members), default=0),
                checkpoint_bytes=checkpoint_bytes,
                max_segment_saved=best_segment,
                out_bytes=unit_output_bytes(profile, hi - 1) if hi > lo else 0,
                returning_heads=sum(1 for i in moved_in if i - 1 not in moved_in),
                # only a head at the end runs forward and backward in one cycle; a unit moved here
                # from mid-model (BART's decoder position embedding) is stashed like the rest
                head_saved=sum(
                    units[i].saved_bytes
                    for i in moved_in
                    if all(u.placed_with is not None for u in units[i + 1 :])
                ),
                reentries=reentries,
            )
        )
    return out


def forward_stages(layout: list[Stage], config: Config) -> int:
    """Pipeline stages as PopTorch counts them: one per IPU, plus one per tied head that returns to
    an earlier IPU and one per resumption of a stage after it (rules/cross_field.pipeline_stages).
    Stash depths and the fill and flush follow this count, not the number of IPUs."""
    if not config.pipelined or len(layout) < 2:
        return len(layout)
    return len(layout) + sum(s.returning_heads + s.reentries for s in layout)
