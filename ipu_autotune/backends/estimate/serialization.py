"""embedding_serialization in the estimate: the vocabulary projection as `factor` matmuls.

`poptorch.serializedMatMul(..., OutputChannels, factor)` becomes, in PopART, `factor`
matmuls over slices of the weight's output channels whose results are concatenated
(willow/src/transforms/serializematmuls.cpp). The planner lays out one slice at a time:
the input whole, the weight slice and its logits slice, so the projection's temporaries
shrink by the factor. Weights, optimizer state and the concatenated logits (saved for the
loss's backward) are unchanged; each slice is an op of its own (code).
"""

from __future__ import annotations

from dataclasses import replace

from ...profiles.trace import ModelProfile
from ...problem import Config, Problem
from ...profiles.placement import unit_of_path
from .layout import Stage, stage_members


def serialize_projection(problem: Problem, config: Config, profile: ModelProfile,
                         layout: list[Stage]) -> list[Stage]:
    factor = config.embedding_serialization
    if factor == 1:
        return layout
    from ...models import hf

    found = hf.vocabulary_projection(problem.model, problem.task) if hf.is_hf(problem.model) else None
    if found is None:
        return layout
    head = unit_of_path(profile, found[0])
    unit = profile.units[head]
    # max_op_bytes is the largest matmul's inputs (activation and weight) plus its output.
    piece = unit.in_bytes + (unit.max_op_bytes - unit.in_bytes) / factor
    out = []
    for stage, members in zip(layout, stage_members(profile, config)):
        if head in members:
            others = max((profile.units[i].max_op_bytes for i in members if i != head), default=0)
            stage = replace(stage, max_op_bytes=int(max(others, piece)), ops=stage.ops + factor - 1)
        out.append(stage)
    return out
