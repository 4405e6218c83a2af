"""Step time and throughput (docs/estimator.md, "Time").

Per micro-batch and IPU: conv/matmul FLOPs at the precision's peak times a calibrated
efficiency (lower with a smaller available memory proportion), memory-bound ops at SRAM
bandwidth, a fixed cost per op, recomputation's extra forward, and the copy to the next
IPU. Then the schedule: a pipeline runs (accumulation + stages - 1) cycles of its slowest
IPU, sharded execution the sum of its stages, plus the weight update, the all-reduce
across replicas, input transfer and a host round trip per call.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...batch import samples_per_call
from ...problem import Config, Problem
from ...rules.optimum_target import is_optimum, outer_fragment_params
from ..targets import Target
from .constants import EstimatorConstants
from .layout import Stage, forward_stages
from .memory import (
    activation_scale,
    input_scale,
    offloaded,
    state_bytes_per_param,
    state_elements_per_replica,
)


def compute_mode(config: Config) -> str:
    if not config.half_compute:
        return "fp32"
    return "fp16.16" if config.partials == "half" else "fp16.32"


def amp_speed(amp: float, k: EstimatorConstants) -> float:
    """Relative conv/matmul speed: 1 at saturation, falling as the planner gets less memory."""
    short = max(0.0, k.amp_saturation - amp) / k.amp_saturation
    return 1.0 / (1.0 + k.amp_slowdown * short)


@dataclass(frozen=True)
class StageTime:
    forward_s: float
    backward_s: float
    recompute_s: float
    transfer_s: float

    @property
    def total(self) -> float:
        return self.forward_s + self.backward_s + self.recompute_s + self.transfer_s


def stage_time(
    config: Config, stage: Stage, n_stages: int, target: Target, k: EstimatorConstants
) -> StageTime:
    mode = compute_mode(config)
    amp = config.available_memory_proportion[
        min(stage.index, len(config.available_memory_proportion) - 1)
    ]
    rate = target.peak_flops(mode) * k.matmul_efficiency[mode] * amp_speed(amp, k)
    a = activation_scale(config)
    light_s = (stage.light_bytes * a * k.light_traffic_factor) / target.sram_bytes_per_s
    other_s = stage.other_flops / (target.peak_flops("fp32") * 0.25)
    ops_s = stage.ops * k.op_overhead_s

    heavy_fwd = stage.heavy_flops / rate
    fwd = heavy_fwd + light_s + other_s + ops_s
    # Backward: data and weight gradients for conv/matmul, about twice the light work.
    bwd = 2 * heavy_fwd + 2 * (light_s + other_s) + 2 * ops_s

    recompute = config.effective_recompute
    last_pipeline_stage = config.pipelined and stage.index == n_stages - 1
    if recompute in ("pipeline", "all") and not last_pipeline_stage:
        extra = fwd
    elif recompute == "standard":
        extra = light_s + other_s + ops_s * 0.5
    elif recompute == "norm_only":
        extra = (light_s + other_s) * 0.5
    else:
        extra = 0.0

    transfer = 0.0
    if n_stages > 1 and stage.index < n_stages - 1:
        link = target.ipu_link_bytes_per_s * k.link_bandwidth_scale
        transfer = 2 * stage.out_bytes * a / link  # activation forward, its gradient back
    return StageTime(fwd, bwd, extra, transfer)


@dataclass(frozen=True)
class Timing:
    step_time_s: float  # one weight update, device side
    call_time_s: float  # one call of the PopTorch model (device_iterations updates)
    throughput: float  # samples/s, whole system
    stage_seconds: list[float]
    parts: dict[str, float]


#: ops PopART runs per parameter tensor in a weight update, after the last micro-batch's
#: backward (the accumulate outer fragment): one Accumulate per optimizer state tensor, the
#: updater and var-update ops, and the gradient accumulator zeroed (popart willow/src/patterns/
#: adamdecompose.cpp AdamDecompose::apply: accl1, accl2, AdamUpdaterOp, (LAMB: two LambSquareOps),
#: AdamVarUpdateOp, AccumulatorUpdateOp; sgd1decompose.cpp / sgd2decompose.cpp for SGD).
UPDATE_OPS_PER_TENSOR = {
    "sgd_combined": 2,
    "sgd": 3,
    "rmsprop": 4,
    "adam": 5,
    "adamw": 5,
    "lamb": 7,
}


def update_ops_seconds(problem: Problem, stages: list[Stage], k: EstimatorConstants) -> float:
    """The weight update's fixed cost: each IPU runs its tensors' update ops one after another.
    PopART's default accumulateOuterFragmentSettings.schedule is Serial (popart
    sessionoptions.hpp, AccumulateOuterFragmentSettings): the IPUs' updates do not overlap,
    so they add up; under --trainer optimum, IPUTrainer's overlap (outer_fragment_params)."""
    per_ipu = [
        s.param_tensors * UPDATE_OPS_PER_TENSOR[problem.optimizer] * k.update_op_s for s in stages
    ]
    return outer_fragment_params(problem, per_ipu) if is_optimum(problem) else sum(per_ipu)


def timing(
    problem: Problem, config: Config, stages: list[Stage], target: Target, k: EstimatorConstants
) -> Timing:
    n = forward_stages(stages, config)
    times = [stage_time(config, s, n, target, k) for s in stages]
    ga = config.gradient_accumulation

    input_s = (
        stages[0].in_bytes
        * input_scale(config)
        / (target.host_bytes_per_s * k.host_bandwidth_scale)
    )
    # No overlap credit for I/O tiles: the exported code only reserves them
    # (TensorLocations.numIOTiles); without poptorch.set_overlap_for_input/output the host
    # transfer stays on the step's critical path and the tiles are only lost to compute.
    per_stage = [t.total for t in times]
    per_stage[0] += input_s
    if config.pipelined:
        cycle = max(per_stage) + k.pipeline_cycle_overhead_s
        compute = (ga + n - 1) * cycle
    else:
        compute = ga * sum(per_stage)

    # Weight update: streaming the optimizer state when it is offloaded. The IPUs' outer
    # fragments overlap (optimum_target.outer_fragment_params says which).
    outer_params = outer_fragment_params(problem, [s.params for s in stages])
    update = update_ops_seconds(problem, stages, k)
    if offloaded(problem, config):  # a state to stream, and Streaming Memory to stream it to
        # Each replica streams its own shard of each stage's state
        # (memory.state_elements_per_replica).
        elements = outer_fragment_params(
            problem, [state_elements_per_replica(problem, config, s) for s in stages]
        )
        state = elements * state_bytes_per_param(problem, config)
        update += 2 * state / max(target.streaming_bytes_per_s, 1.0)

    allreduce = 0.0
    if config.replicas > 1:
        r = config.replicas
        grad_bytes = outer_params * (2.0 if config.half_weights else 4.0)
        link = target.ipu_link_bytes_per_s * k.link_bandwidth_scale
        allreduce = 2 * (r - 1) / r * grad_bytes / link

    step = compute + update + allreduce
    di = config.device_iterations
    call = di * step + k.host_call_overhead_s
    samples = samples_per_call(problem, config)
    return Timing(
        step_time_s=step,
        call_time_s=call,
        throughput=samples / call,
        stage_seconds=per_stage,
        parts={
            "compute": compute,
            "weight_update": update,
            "all_reduce": allreduce,
            "host_per_step": k.host_call_overhead_s / di,
            "input_per_micro_batch": input_s,
        },
    )
