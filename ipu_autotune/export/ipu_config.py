"""A configuration as an optimum-graphcore `IPUConfig` (`ipu_config.json`), or a refusal.

Only keys `IPUConfig.__init__` takes are written (optimum/graphcore/ipu_configuration.py,
class IPUConfig, huggingface/optimum-graphcore). What IPUConfig cannot hold but
`IPUTrainingArguments` can (`fp32`, `loss_scaling`, the micro-batch, the loader) is the
IPUTrainer block's (export/trainer.py). A config IPUTrainer would not train as it was
estimated (sharded, 16.32, checkpoints optimum would not place, a serialisation factor
optimum cannot run...: `optimum_target.unexpressible`) is refused with the reasons, never
exported approximately.

`layers_per_ipu` counts the model's repeated layers per IPU, the way optimum's
`parallelize()` places them (`get_layer_ipu`; embeddings ride on IPU0 outside the count;
a tied head on IPU0, other heads on the last IPU; T5's encoder and decoder blocks are one
list, profiles/optimum_placement.py).
"""

from __future__ import annotations

import json
from typing import Any

from ..knob_spec import SPEC
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..profiles.optimum_placement import layer_units
from ..rules.optimum_target import model_refusal, unexpressible

#: The keys IPUConfig accepts (its __init__ takes exactly these; anything else is rejected
#: as an unknown argument: IncompatibleIPUConfigError).
IPU_CONFIG_FIELDS = frozenset(
    {
        "seed",
        "ipus_per_replica",
        "layers_per_ipu",
        "replication_factor",
        "inference_replication_factor",
        "gradient_accumulation_steps",
        "device_iterations",
        "inference_device_iterations",
        "optimizer_state_offchip",
        "replicated_tensor_sharding",
        "auto_loss_scaling",
        "sharded_execution_for_inference",
        "matmul_proportion",
        "enable_half_partials",
        "executable_cache_dir",
        "embedding_serialization_factor",
        "recompute_checkpoint_every_layer",
        "output_mode",
        "execute_encoder_on_cpu_for_generation",
    }
)


class NotAnIPUConfig(ValueError):
    """The config cannot be trained by IPUTrainer + IPUConfig as it was estimated."""

    def __init__(
        self,
        reasons: list[str],
        fix: str = "tune with --trainer optimum to search only configs IPUConfig expresses",
    ):
        self.reasons, self.fix = reasons, fix
        super().__init__(
            "an IPUConfig cannot say this config: " + "; ".join(reasons) + f" ({fix})"
        )


def layers_per_ipu(problem: Problem, config: Config, profile: ModelProfile) -> list[int]:
    from ..profiles.placement import stage_bounds

    layers = layer_units(problem, profile)
    return [sum(1 for i in layers if lo <= i < hi) for lo, hi in stage_bounds(profile, config)]


def ipu_config(problem: Problem, config: Config, profile: ModelProfile) -> dict[str, Any]:
    """The IPUConfig dict; raises NotAnIPUConfig when IPUTrainer would train something else."""
    refusal = model_refusal(problem)
    if refusal:  # no config of this model trains with IPUTrainer: --trainer optimum would not help
        raise NotAnIPUConfig([refusal], fix="train it with the PopTorch snippet (best_options.py)")
    reasons = unexpressible(problem, config)
    if reasons:
        raise NotAnIPUConfig(reasons)
    c = config
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
        # one factor for the vocabulary projection and the input embedding (only one applies)
        "embedding_serialization_factor": max(
            getattr(c, k.name)
            for k in SPEC
            if k.ipu_config_key == "embedding_serialization_factor"
        ),
        # unexpressible() has checked the checkpoints are optimum's own
        # (profiles/placement.optimum_checkpoints)
        "recompute_checkpoint_every_layer": bool(c.checkpoints)
        and c.effective_recompute == "pipeline",
    }
    assert set(out) <= IPU_CONFIG_FIELDS
    return out


def render_ipu_config(problem: Problem, config: Config, profile: ModelProfile) -> str:
    return json.dumps(ipu_config(problem, config, profile), indent=2) + "\n"
