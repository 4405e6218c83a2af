"""embedding_serialization in the estimate: the vocabulary projection as `factor` matmuls
(and input_embedding_serialization, the token embedding's look-up in pieces, below).

`poptorch.serializedMatMul(..., OutputChannels, factor)` becomes, in PopART, `factor`
matmuls over slices of the weight's output channels whose results are concatenated
(willow/src/transforms/serializematmuls.cpp). The planner lays out one slice at a time:
the input whole, the weight slice and its logits slice, so the projection's temporaries
shrink by the factor. Weights, optimizer state and the concatenated logits (saved for the
loss's backward) are unchanged; each slice is an op of its own (code).
"""

from __future__ import annotations

from dataclasses import replace

from ...knob_conditions import input_embedding
from ...problem import Config, Problem
from ...profiles.model_profile import ModelProfile
from ...profiles.placement import unit_of_path
from .layout import Stage, stage_members


def serialize_projection(
    problem: Problem, config: Config, profile: ModelProfile, layout: list[Stage]
) -> list[Stage]:
    layout = serialize_input_embedding(problem, config, profile, layout)
    factor = config.embedding_serialization
    if factor == 1:
        return layout
    from ...models import hf

    found = (
        hf.vocabulary_projection(problem.model, problem.task) if hf.is_hf(problem.model) else None
    )
    if found is None:
        return layout
    head = unit_of_path(profile, found[0])
    unit = profile.units[head]
    # max_op_bytes is the largest matmul's inputs (activation and weight) plus its output.
    piece = unit.in_bytes + (unit.max_op_bytes - unit.in_bytes) / factor
    out = []
    for stage, members in zip(layout, stage_members(profile, config), strict=True):
        if head in members:
            others = max((profile.units[i].max_op_bytes for i in members if i != head), default=0)
            stage = replace(
                stage, max_op_bytes=int(max(others, piece)), ops=stage.ops + factor - 1
            )
        out.append(stage)
    return out


#: ops each look-up after the first adds: the offset, two comparisons, the index mask, the
#: look-up, the output mask and the sum (optimum-graphcore's SerializedEmbedding.forward)
OPS_PER_EXTRA_LOOKUP = 7


def serialize_input_embedding(
    problem: Problem, config: Config, profile: ModelProfile, layout: list[Stage]
) -> list[Stage]:
    """input_embedding_serialization: the token embedding as `factor` masked look-ups into
    slices of its table (optimum-graphcore's SerializedEmbedding), each output masked and
    summed. What it saves is in the embedding's gradient (a slice's update at a time), which
    this model does not count, so it earns no memory here: only its cost, the extra ops
    (code, op overhead) and the masked [micro-batch, tokens, width] outputs (elementwise
    traffic). A compile measures the saving."""
    factor = config.input_embedding_serialization
    found = input_embedding(problem) if factor != 1 else None
    if found is None:
        return layout
    path, _, width = found
    head = unit_of_path(profile, path)
    tokens = profile.batch_size * max(1, problem.seq_len)
    masked = (factor - 1) * tokens * width * 4  # FP32 bytes, as the profile counts them
    out = []
    for stage, members in zip(layout, stage_members(profile, config), strict=True):
        if head in members:
            stage = replace(
                stage,
                ops=stage.ops + OPS_PER_EXTRA_LOOKUP * (factor - 1),
                light_bytes=stage.light_bytes + masked,
            )
        out.append(stage)
    return out
