"""A configuration as an optimum-graphcore `IPUConfig` (`ipu_config.json`).

Only keys `IPUConfig.__init__` pops are written (optimum/graphcore/ipu_configuration.py,
class IPUConfig, huggingface/optimum-graphcore): `ipus_per_replica`, `layers_per_ipu`,
`replication_factor`, `gradient_accumulation_steps`, `device_iterations`,
`optimizer_state_offchip`, `replicated_tensor_sharding`, `auto_loss_scaling`,
`matmul_proportion`, `enable_half_partials`, `embedding_serialization_factor`,
`recompute_checkpoint_every_layer`. What IPUConfig cannot say (FP16 weights are the
trainer's `fp16` argument; a fixed loss scale; sharded training, as `IPUConfig._to_options`
always pipelines) is returned as notes for the user, never as extra keys.

`layers_per_ipu` counts the model's repeated layers per IPU, the way optimum's
`parallelize()` places them (embeddings ride on IPU0 outside the count; heads on the last
IPU). For a model without such layers (a torchvision CNN), every traced unit counts.
"""

from __future__ import annotations

import json

from ..models.trace import ModelProfile
from ..problem import Config, Problem

#: The keys IPUConfig accepts (its __init__ pops exactly these; anything else is rejected
#: by optimum's BaseConfig as an unknown attribute of the JSON it saves and loads).
IPU_CONFIG_FIELDS = frozenset({
    "seed", "ipus_per_replica", "layers_per_ipu", "replication_factor", "inference_replication_factor",
    "gradient_accumulation_steps", "device_iterations", "inference_device_iterations",
    "optimizer_state_offchip", "replicated_tensor_sharding", "auto_loss_scaling",
    "sharded_execution_for_inference", "matmul_proportion", "enable_half_partials", "executable_cache_dir",
    "embedding_serialization_factor", "recompute_checkpoint_every_layer", "output_mode",
    "execute_encoder_on_cpu_for_generation",
})


def layer_units(problem: Problem, profile: ModelProfile) -> list[int]:
    """Indices of the units that are 'layers' in IPUConfig's sense."""
    from ..models import hf

    if hf.is_hf(problem.model):
        stacks = hf.layer_stacks(problem.model, problem.task)
        return [i for i, u in enumerate(profile.units)
                if u.path.rsplit(".", 1)[0] in stacks and u.path.rsplit(".", 1)[-1].isdigit()]
    return list(range(len(profile.units)))


def layers_per_ipu(problem: Problem, config: Config, profile: ModelProfile) -> list[int]:
    from ..backends.estimate.layout import stage_bounds

    layers = layer_units(problem, profile)
    return [sum(1 for i in layers if lo <= i < hi) for lo, hi in stage_bounds(profile, config)]


def ipu_config(problem: Problem, config: Config, profile: ModelProfile) -> tuple[dict, list[str]]:
    """The IPUConfig dict, and notes on what it cannot carry."""
    c = config
    layers = layer_units(problem, profile)
    checkpointed = {profile.unit_index(p) for p in c.checkpoints}
    every_layer = bool(layers) and c.effective_recompute in ("pipeline", "all") and \
        all(i in checkpointed for i in layers)
    out = {
        "ipus_per_replica": c.ipus_per_replica,
        "layers_per_ipu": layers_per_ipu(problem, c, profile),
        "replication_factor": c.replicas,
        "gradient_accumulation_steps": c.gradient_accumulation,
        "device_iterations": c.device_iterations,
        "optimizer_state_offchip": c.optimizer_offload,
        "replicated_tensor_sharding": c.replicated_tensor_sharding,
        "auto_loss_scaling": c.loss_scaling == "auto",
        "matmul_proportion": list(c.available_memory_proportion),
        "enable_half_partials": c.half_compute and c.partials == "half",
        "embedding_serialization_factor": c.embedding_serialization,
        "recompute_checkpoint_every_layer": every_layer,
    }
    assert set(out) <= IPU_CONFIG_FIELDS
    notes = []
    if c.half_weights or c.half_compute:
        notes.append(f"precision {c.precision}: pass fp16=True to IPUTrainingArguments (IPUConfig has no precision)")
    if c.loss_scaling not in ("auto", 1.0):
        notes.append(f"loss scale {c.loss_scaling:g}: IPUConfig has none; set it on your optimizer")
    if c.execution == "sharded" and c.ipus_per_replica > 1:
        notes.append("sharded execution: IPUConfig always trains pipelined; use the PopTorch snippet instead")
    if not c.stochastic_rounding:
        notes.append("IPUConfig always enables stochastic rounding for training")
    if c.checkpoints and not every_layer:
        notes.append("checkpoints on some layers only: IPUConfig checkpoints every layer or none; "
                     "the PopTorch snippet places them exactly")
    return out, notes


def render_ipu_config(problem: Problem, config: Config, profile: ModelProfile) -> tuple[str, list[str]]:
    data, notes = ipu_config(problem, config, profile)
    return json.dumps(data, indent=2) + "\n", notes
