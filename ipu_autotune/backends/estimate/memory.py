"""Memory per IPU, by category, for one replica (docs/estimator.md, "Memory").

Always-live: weights, gradient accumulators, optimizer state, pipeline stash, code and
exchange. Not-always-live peak: the activations live at the start of a backward pass
(or of a recomputed segment) plus the planner's temporaries. OOM is decided on the
busiest tile: mean bytes per tile times a calibrated imbalance.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...knob_conditions import has_optimizer_state
from ...knob_spec import applies
from ...problem import Config, Problem
from ...profiles.attribution import MIN_ELEMENTS_FOR_SHARDING
from ..targets import Target
from .constants import EstimatorConstants
from .layout import Stage


def activation_scale(config: Config) -> float:
    """Activation bytes relative to the FP32 trace."""
    return 0.5 if config.half_compute else 1.0


def input_scale(config: Config) -> float:
    """Input bytes relative to FP32: 8-bit I/O sends uint8, normalised on the IPU."""
    if config.eight_bit_io:
        return 0.25
    return activation_scale(config)


def state_bytes_per_param(problem: Problem, config: Config) -> float:
    """Optimizer state per parameter, PopTorch defaults (hardware notes, section 2.4)."""
    first = 2.0 if config.optimizer_state == "half" else 4.0
    weight = 2.0 if config.half_weights else 4.0
    return {
        "sgd": first,  # velocity (velocity_accum_type)
        "sgd_combined": weight,  # one combined accumulator+velocity tensor
        "adam": first + 4.0,  # m (first-order type) + v (second-order, FP32)
        "adamw": first + 4.0,
        "lamb": first + 4.0,
        "rmsprop": 4.0,  # second-order only (PyTorch default momentum 0)
    }[problem.optimizer]


def accumulator_bytes_per_param(problem: Problem, config: Config) -> float:
    """Gradient accumulator (accum_type) when accumulating or pipelining; none for SGD combined."""
    if not has_optimizer_state(problem):
        return 0.0
    if config.gradient_accumulation > 1 or config.pipelined:
        return 2.0 if config.optimizer_state == "half" else 4.0
    return 0.0


def sharded(problem: Problem, config: Config) -> bool:
    """Replicated tensor sharding in effect: sgd_combined has no state tensors to shard (its
    location settings do nothing, PopTorch optim.SGD docstring), one replica nothing to
    shard over."""
    return config.replicated_tensor_sharding and applies(
        "replicated_tensor_sharding", problem, config
    )


def offloaded(problem: Problem, config: Config) -> bool:
    """Optimizer state in Streaming Memory: asked of the knob spec (no state, or no Streaming
    Memory on Mk1: nothing moves)."""
    return config.optimizer_offload and applies("optimizer_offload", problem, config)


def state_elements_per_replica(problem: Problem, config: Config, stage: Stage) -> float:
    """Optimizer-state elements one replica keeps of a stage's parameters. Sharded, each
    tensor of at least 8192 elements (minElementsForReplicatedTensorSharding) keeps
    (n - 1) / R + 1 of them (popart willow/src/transforms/streamingmemoryopinserter.cpp,
    insertRemoteLoadOp: "The original shape becomes the RTS shape"); the padding of at most
    one element per tensor is left out."""
    if not sharded(problem, config):
        return float(stage.params)
    shardable = stage.params - stage.unshardable_params
    return shardable / config.replicas + stage.unshardable_params


def optimizer_state_on_chip(problem: Problem, config: Config, stage: Stage) -> float:
    """Bytes of optimizer state on chip per replica, as PopART places it.

    Offloaded (optimizerStateTensorLocationSettings off chip), the state lives in Streaming
    Memory and each tensor is loaded back for its update: the largest tensor's state is on
    chip at once, and with sharding only its shard, since the optimizer op is wired to the
    loaded (sharded) tensor, not to the gathered one (streamingmemoryopinserter.cpp,
    applyTensor). On chip, sharding keeps each replica's shard of every tensor. A sharded
    update also all-gathers the updated weight slice back to full size before CopyVarUpdate
    writes the weight (applyReplicatedOptimizerSharding, case 6): a transient of the update,
    after the backward pass has freed its activations, so not counted here.
    """
    per_element = state_bytes_per_param(problem, config)
    if not has_optimizer_state(problem):  # one combined tensor, always on chip
        return stage.params * per_element
    shards = sharded(problem, config)
    if offloaded(problem, config):
        largest = stage.largest_param
        if shards and largest >= MIN_ELEMENTS_FOR_SHARDING:
            largest = (largest - 1) // config.replicas + 1
        return largest * per_element
    return state_elements_per_replica(problem, config, stage) * per_element


#: the categories that are parameter counts times their bytes: exact, no error bar
EXACT = ("weights", "optimizer", "gradients")


@dataclass(frozen=True)
class StageMemory:
    breakdown: dict[str, int]
    required: int
    max_tile: int

    @property
    def exact(self) -> int:
        """Bytes no compiler decision changes: weights, gradient accumulators, optimizer state."""
        return sum(self.breakdown[c] for c in EXACT)


def _activations_and_stash(stage: Stage, config: Config, n_stages: int) -> tuple[float, float]:
    """Live activations of one micro-batch, and the pipeline stash, in bytes."""
    a = activation_scale(config)
    stage_in = stage.in_bytes * (input_scale(config) if stage.first == 0 else a)
    saved = stage.saved * a
    heavy = stage.saved_heavy * a
    light = stage.saved_light * a
    checkpoints = stage.checkpoint_bytes * a
    mode = config.effective_recompute

    # What must stay from forward to backward, and what is live while a backward runs.
    if mode == "none":
        kept, live = saved, saved
    elif mode == "standard":  # keep conv/matmul outputs, recompute norms and elementwise
        kept, live = heavy + stage_in, heavy + stage_in + light / max(1, stage.last - stage.first)
    elif mode == "norm_only":
        kept = heavy + 0.5 * light + stage_in
        live = kept
    else:  # pipeline, all: keep the stage input and checkpoints, recompute the rest
        kept = stage_in + checkpoints
        live = checkpoints + (stage.max_segment_saved * a if checkpoints else saved)

    if not config.pipelined:
        return live, 0.0
    depth = 2 * (n_stages - stage.index) - 1  # micro-batches in flight on IPU k
    if mode == "none":
        return saved, (depth - 1) * (saved - stage.head_saved * a)
    if stage.index == n_stages - 1 and mode == "pipeline":
        # The last stage runs forward and backward in one cycle: nothing recomputed, unless
        # it holds recomputation checkpoints (BERT's checkpoint on every layer). Then it keeps
        # the checkpoints and recomputes between them [D: calibrated on Graphcore's BERT
        # layouts M13-M17, whose 7-layer last stages only fit that way].
        return (live if checkpoints else saved), depth * stage_in
    return live, depth * kept


def stage_memory(
    problem: Problem,
    config: Config,
    stage: Stage,
    n_stages: int,
    target: Target,
    k: EstimatorConstants,
) -> StageMemory:
    weight_bytes = 2.0 if config.half_weights else 4.0
    weights = stage.params * weight_bytes

    gradients = stage.params * accumulator_bytes_per_param(problem, config)

    optimizer = optimizer_state_on_chip(problem, config, stage)

    activations, stash = _activations_and_stash(stage, config, n_stages)

    amp = config.available_memory_proportion[
        min(stage.index, len(config.available_memory_proportion) - 1)
    ]
    compute_tiles = target.tiles - config.io_tiles
    plan_need = k.temporary_plan_factor * stage.max_op_bytes * activation_scale(config)
    if config.half_compute and config.partials == "half":
        plan_need *= 0.5  # half partials halve the AMP-unit temporaries (MPO 5.2)
    temporary = min(amp * target.bytes_per_tile * compute_tiles, plan_need)
    if gradients == 0:
        # Without accumulators each weight gradient is transient: the largest one at a time.
        temporary += stage.largest_param * weight_bytes

    recomputed = config.effective_recompute in ("pipeline", "all", "standard")
    op_code = (
        stage.ops * k.code_bytes_per_op * (1 + (k.recompute_code_fraction if recomputed else 0))
    )
    if amp < k.amp_code_knee:
        op_code *= 1 + (k.amp_code_knee - amp) / k.amp_code_knee
    code = k.code_base_bytes + op_code

    breakdown = {
        "weights": int(weights),
        "optimizer": int(optimizer),
        "gradients": int(gradients),
        "activations": int(activations),
        "stash": int(stash),
        "temporary": int(temporary),
        "code/exchange": int(code),
    }
    required = sum(breakdown.values())
    max_tile = int(required / compute_tiles * k.tile_imbalance)
    return StageMemory(breakdown, required, max_tile)
