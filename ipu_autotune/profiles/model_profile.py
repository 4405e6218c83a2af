"""A traced model's profile: its units (where a pipeline stage may begin) and their costs.

The types alone, so that what reads a profile (profiles/optimum_placement.py, which
trace.profile_for applies) need not import the tracer.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Unit:
    path: str  # the module that begins it: where BeginBlock goes
    members: list[str] = field(default_factory=list)  # module paths merged into it
    params: int = 0
    largest_param: int = 0  # elements of its biggest parameter tensor
    # Elements in tensors too small for PopART to shard over replicas (biases, norms):
    # their optimizer state stays whole under replicated tensor sharding.
    unshardable_params: int = 0
    param_tensors: int = 0  # trainable tensors: the weight update runs its ops once per tensor
    in_bytes: int = 0  # what crosses into it per micro-batch (FP32)
    # Inputs it shares with the unit before, passed along unchanged (BERT's attention mask
    # goes to every layer): they cross IPUs, but no unit produces them, so no checkpoint
    # keeps them.
    carried_in_bytes: int = 0
    saved_heavy_bytes: int = (
        0  # saved for backward, produced by conv/matmul (FP32, per micro-batch)
    )
    saved_light_bytes: int = 0  # saved, produced by norms and elementwise ops (cheap to recompute)
    flops: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    light_bytes: int = 0  # bytes written by memory-bound ops (time model)
    ops: int = 0  # non-view ops: drives code and exchange size
    max_op_bytes: int = 0  # in + out bytes of its largest conv/matmul (temporary planning)
    # A tied head (GPT-2's lm_head, BERT's MLM decoder) reads a parameter another unit owns:
    # it runs where that unit runs, as Graphcore places it (head with the embedding on IPU0).
    placed_with: int | None = None
    # Tensors the size of its output that a recomputation checkpoint on it keeps: 1, the output
    # itself (the snippet's hook); more where --trainer optimum's hook checkpoints every tensor the
    # layer returns (profiles/optimum_placement.CHECKPOINTED_OUTPUTS: GPT-2's key and value too).
    checkpointed_outputs: int = 1

    @property
    def saved_bytes(self) -> int:
        return self.saved_heavy_bytes + self.saved_light_bytes

    @property
    def forward_flops(self) -> float:
        return sum(self.flops.values())


@dataclass(frozen=True)
class TraceLog:
    """The forward pass as logged (models/forward_log.py), kept so that the units can be cut
    again where a split or checkpoint lands inside one (profiles/refine.py)."""

    events: list[Any]
    starts: tuple[str, ...]  # the modules that begin units
    candidates: frozenset[str]  # modules not broken down further
    params: tuple[
        tuple[str, int, int], ...
    ]  # (module path, storage, elements) per trainable tensor


@dataclass
class ModelProfile:
    model: str
    batch_size: int
    input_shape: tuple[int, ...]
    num_classes: int
    units: list[Unit]
    module_order: list[str]  # every module path, in first-execution order
    input_bytes: int  # one micro-batch of FP32 input
    trace_seconds: float
    task: str = ""  # the hf: task traced (resolved); "" for a module traced directly
    log: TraceLog | None = field(default=None, repr=False, compare=False)
    # profiles/refine.py's profiles cut inside units, by the paths cut at (not copied by replace)
    refinements: dict[object, ModelProfile] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # profiles/refine.py's unit for a split or checkpoint path, by (which, path): every estimate
    # of a climb asks them again for the same few paths
    placements: dict[tuple[str, str], int | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def params(self) -> int:
        return sum(u.params for u in self.units)

    def unit_index(self, path: str) -> int | None:
        for i, u in enumerate(self.units):
            if u.path == path or path in u.members:
                return i
        return None
