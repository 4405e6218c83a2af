"""The rules every configuration obeys, checked before any backend sees it.

Each rule is a small function returning a message that names the rule and the fix, or
None. `violations` runs them all; `validate` raises the first one as a UsageError.
Model-aware rules (split and checkpoint paths, model_paths.py) need the traced model's module
list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import UsageError
from ..host import pipeline as host
from ..knob_conditions import has_optimizer_state, takes_images
from ..knob_spec import SPEC
from ..problem import Config, Problem
from .model_paths import model_violations, path_syntax, placement_violations


def _ipus_available(p: Problem, c: Config) -> str | None:
    if c.total_ipus > p.ipus:
        return (
            f"the config needs {c.total_ipus} IPUs (ipus_per_replica {c.ipus_per_replica} x "
            f"replicas {c.replicas}) but the problem has {p.ipus}; lower replicas or raise --ipus"
        )
    return None


def _power_of_two(p: Problem, c: Config) -> str | None:
    # PopTorch refuses another count on hardware unless autoRoundNumIPUs(True), which the export
    # sets; then it acquires the next power of two, and those IPUs must exist.
    if c.reserved_ipus > p.ipus:
        return (
            f"the config uses {c.total_ipus} IPUs, which PopTorch reserves as a power of two: "
            f"{c.reserved_ipus}, but the problem has {p.ipus}; use ipus_per_replica x replicas "
            f"in 1, 2, 4, 8, ... up to {p.ipus}"
        )
    return None


def _split_count(p: Problem, c: Config) -> str | None:
    if len(c.splits) != c.ipus_per_replica - 1:
        return (
            f"{len(c.splits)} split(s) for ipus_per_replica {c.ipus_per_replica}; "
            f"a replica of N IPUs needs N-1 splits"
        )
    return None


def _amp_per_ipu(p: Problem, c: Config) -> str | None:
    amp = c.available_memory_proportion
    if len(amp) != c.ipus_per_replica:
        return (
            f"available_memory_proportion has {len(amp)} value(s); give one per IPU of a "
            f"replica ({c.ipus_per_replica})"
        )
    for i, a in enumerate(amp):
        if not 0 < a <= 1:
            return f"available_memory_proportion[{i}] = {a} is outside (0, 1]"
    return None


def pipeline_stages(p: Problem, ipus_per_replica: int) -> int:
    """Forward stages as PopTorch counts them (IPU switches + 1): one per IPU, plus one per
    tied head that returns to IPU0, and at most two per run on IPU0 between layers (BART's
    decoder position embedding under --trainer optimum: there and back, when the layers on
    both sides share an IPU; the bound, since this count does not know the splits)."""
    from ..profiles.placement import head_runs

    if ipus_per_replica <= 1:
        return 1
    return ipus_per_replica + sum(1 if after is None else 2 for _, after in head_runs(p))


def min_pipeline_accumulation(p: Problem, ipus_per_replica: int) -> int:
    """PopTorch (Compiler.cpp): pipelined training needs gradientAccumulation >= the training
    pipeline's stages, 2 x forward stages - 1."""
    return 2 * pipeline_stages(p, ipus_per_replica) - 1 if ipus_per_replica > 1 else 1


def _pipeline_accumulation(p: Problem, c: Config) -> str | None:
    if c.pipelined:
        need = min_pipeline_accumulation(p, c.ipus_per_replica)
        if c.gradient_accumulation < need:
            head = " with the tied head back on IPU0" if need > 2 * c.ipus_per_replica - 1 else ""
            return (
                f"pipelined training over {c.ipus_per_replica} IPUs{head} needs "
                f"gradient_accumulation >= {need} (2 x pipeline stages - 1), got "
                f"{c.gradient_accumulation}"
            )
    return None


def _io_tiles(p: Problem, c: Config) -> str | None:
    if c.io_tiles:
        if c.io_tiles % 2 or not 32 <= c.io_tiles <= 192:
            return f"io_tiles must be 0 or an even number in [32, 192], got {c.io_tiles}"
        if c.execution == "pipelined":
            return (
                'io_tiles need execution = "sharded" '
                "(overlapped I/O is not supported when pipelined)"
            )
    return None


def _auto_loss_scaling(p: Problem, c: Config) -> str | None:
    if c.loss_scaling == "auto" and not c.half_weights:
        return 'loss_scaling = "auto" needs fp16 weights (precision "16.16")'
    return None


def _sharding_needs_replicas(p: Problem, c: Config) -> str | None:
    if c.replicated_tensor_sharding and c.replicas < 2:
        return "replicated_tensor_sharding needs replicas > 1"
    return None


def _pipeline_recompute(p: Problem, c: Config) -> str | None:
    if c.recompute == "pipeline" and not c.pipelined:
        return 'recompute = "pipeline" only applies to pipelined execution over 2+ IPUs'
    return None


def _eight_bit_needs_images(p: Problem, c: Config) -> str | None:
    if c.eight_bit_io and not takes_images(p):
        return (
            f"eight_bit_io needs image inputs [1 or 3, H, W], not {list(p.input_shape)}; "
            "set eight_bit_io = false"
        )
    return None


def _knob_refusals(p: Problem, c: Config) -> str | None:
    """The rules a knob's spec carries (knob_spec.py), each knob's own."""
    for knob in SPEC:
        found: str | None = knob.refusal(p, c) if knob.refusal else None
        if found:
            return found
    return None


def _tied_head_split(p: Problem, c: Config) -> str | None:
    """A head reading the embedding's weight (BERT's MLM decoder, GPT-2's lm_head) runs on the
    embedding's IPU: PopART refuses to copy a variable between virtual graphs when pipelining
    (willow/src/transforms/pipeline.cpp, setIPUCopyPipelineStage), so no stage starts there."""
    if not c.pipelined or not p.token_inputs:
        return None
    from ..profiles.trace import profile_for

    tied = [u.path for u in profile_for(p).units if u.placed_with is not None]
    for split in c.splits:
        head = next((t for t in tied if split == t or split.startswith(t + ".")), None)
        if head is not None:
            return (
                f"split '{split}' puts {head}, tied to the embedding's weight, on another "
                "pipeline stage than that weight: PopART refuses to copy a weight between "
                "stages; split at a layer"
            )
    return None


def _optimum_trainer(p: Problem, c: Config) -> str | None:
    """--trainer optimum: only what IPUTrainer + IPUConfig train as estimated
    (optimum_target.py)."""
    if p.trainer != "optimum":
        return None
    from .optimum_target import unexpressible

    found = unexpressible(p, c)
    return f"--trainer optimum: {found[0]}" if found else None


def _state_location_needs_state(p: Problem, c: Config) -> str | None:
    # PopTorch optim.SGD docstring: with use_combined_accum the optimizer state location
    # settings have no effect, so neither knob changes what runs.
    if not has_optimizer_state(p) and (c.optimizer_offload or c.replicated_tensor_sharding):
        return (
            "optimizer_offload and replicated_tensor_sharding do nothing with sgd_combined "
            "(it keeps no separate optimizer state); set both to false"
        )
    if not has_optimizer_state(p) and c.optimizer_state == "half":
        # The snippet's optim.SGD(use_combined_accum=True) takes no state types, and the
        # estimator counts the combined tensor at the weights' precision.
        return 'optimizer_state = "half" does nothing with sgd_combined; set it to "float"'
    return None


def _global_batch(p: Problem, c: Config) -> str | None:
    if p.global_batch:
        got = host.global_batch(p, c)
        if got != p.global_batch:
            return (
                f"global batch is fixed at {p.global_batch} but micro-batch "
                f"{host.micro_batch(p, c)} x accumulation {c.gradient_accumulation} x replicas "
                f"{c.replicas} = {got}"
            )
    return None


def _global_batch_ceiling(p: Problem, c: Config) -> str | None:
    got = host.global_batch(p, c)
    if not p.global_batch and got > p.max_global_batch:
        return (
            f"global batch {got} (micro-batch {host.micro_batch(p, c)} x accumulation "
            f"{c.gradient_accumulation} x replicas {c.replicas}) is above the ceiling "
            f"{p.max_global_batch}; lower gradient_accumulation or raise --max-global-batch"
        )
    return None


def _samples_per_call(p: Problem, c: Config) -> str | None:
    n = host.samples_per_call(p, c)
    if n > p.dataset_size:
        return (
            f"one call needs {n:,} samples (micro-batch x accumulation x replicas x device "
            f"iterations) but the dataset has {p.dataset_size:,}; a DataLoader with drop_last "
            "yields nothing: lower device_iterations or gradient_accumulation"
        )
    return None


def _host_memory(p: Problem, c: Config) -> str | None:
    need = host.host_bytes_needed(p, c)
    allowed = p.host_memory_gb * 1e9
    if need > allowed:
        return (
            f"one call's samples take {need / 1e9:.1f} GB of host memory "
            f"({host.host_bytes_per_call(p, c) / 1e9:.2f} GB x {host.loader_buffers(c)} loader "
            f"buffers), above --host-memory {p.host_memory_gb:g} GB; lower device_iterations "
            "or loader_workers, or raise --host-memory"
        )
    return None


def _micro_batch(p: Problem, c: Config) -> str | None:
    if host.micro_batch(p, c) > p.dataset_size:
        return (
            f"the dataset ({p.dataset_size:,} samples) is smaller than one micro-batch "
            f"({host.micro_batch(p, c)}); lower --batch-size or check --dataset-size"
        )
    return None


#: Rules of the recipe, not of the hardware: the data and batch defaults a search keeps to.
#: `estimate` answers a configuration that breaks them, naming each (EXIT_BREAKS_RECIPE).
RECIPE_RULES: tuple[Callable[[Problem, Config], str | None], ...] = (
    _global_batch,
    _micro_batch,
    _global_batch_ceiling,
    _samples_per_call,
    _host_memory,
)

#: The recipe rules on one call's host batch: the PopTorch backend checks them before it
#: allocates that batch (backends/poptorch/child.py, refusal).
HOST_BATCH_RULES: tuple[Callable[[Problem, Config], str | None], ...] = (
    _samples_per_call,
    _host_memory,
)

#: `estimate`'s exit code for a configuration estimated although it breaks a recipe rule
#: (documented in the README and cli.py)
EXIT_BREAKS_RECIPE = 4

CONFIG_RULES: tuple[Callable[[Problem, Config], str | None], ...] = (
    path_syntax,
    _ipus_available,
    _power_of_two,
    _split_count,
    _amp_per_ipu,
    _pipeline_accumulation,
    _io_tiles,
    _eight_bit_needs_images,
    _auto_loss_scaling,
    _sharding_needs_replicas,
    _pipeline_recompute,
    _state_location_needs_state,
    _knob_refusals,
    _tied_head_split,
    _optimum_trainer,
    _global_batch,
    _micro_batch,
    _global_batch_ceiling,
    _samples_per_call,
    _host_memory,
)


def check_problem(p: Problem) -> None:
    """What no config can fix: raised as bad input before anything is traced or stored."""
    if p.batch_size > p.dataset_size:
        raise UsageError(
            f"the dataset ({p.dataset_size:,} samples) is smaller than one micro-batch "
            f"({p.batch_size}); lower --batch-size or check --dataset-size"
        )
    if p.global_batch and p.global_batch > p.max_global_batch:
        raise UsageError(
            f"--global-batch {p.global_batch} is above the ceiling {p.max_global_batch}; "
            f"raise --max-global-batch to at least {p.global_batch} or lower --global-batch"
        )
    if p.trainer == "optimum":
        from .optimum_target import TRAINER_OPTIMIZERS, model_refusal

        refusal = model_refusal(p)
        if refusal:
            raise UsageError(
                f"--trainer optimum on '{p.model}': {refusal}. Drop --trainer optimum to tune "
                "for PopTorch"
            )
        if p.optimizer not in TRAINER_OPTIMIZERS:
            raise UsageError(
                f"--trainer optimum: IPUTrainer builds AdamW or LAMB, not {p.optimizer}; "
                "use --optimizer adamw or --optimizer lamb"
            )
    if p.global_batch and p.global_batch > p.dataset_size:
        raise UsageError(
            f"--global-batch {p.global_batch} is more than the dataset ({p.dataset_size:,} "
            "samples): not one weight update per epoch; lower it or check --dataset-size"
        )


def violations(
    problem: Problem,
    config: Config,
    module_order: Sequence[str] | None = None,
    recipe: bool = True,
) -> list[str]:
    """Every rule `config` breaks; `recipe=False` leaves out RECIPE_RULES. With the model's
    `module_order`, splits and checkpoints are checked against the traced model too."""
    rules = CONFIG_RULES if recipe else tuple(r for r in CONFIG_RULES if r not in RECIPE_RULES)
    found = [msg for rule in rules if (msg := rule(problem, config))]
    if module_order is not None and not any("module path" in m for m in found):
        unknown = model_violations(config, module_order)
        found += unknown
        if not unknown and (config.splits or config.checkpoints):
            from ..profiles.trace import profile_for

            found += placement_violations(config, profile_for(problem))
    return found


def recipe_violations(problem: Problem, config: Config) -> dict[str, str]:
    """The recipe rules `config` breaks, by rule name ('global_batch_ceiling': message)."""
    return {
        rule.__name__.strip("_"): msg for rule in RECIPE_RULES if (msg := rule(problem, config))
    }


def validate(
    problem: Problem,
    config: Config,
    module_order: Sequence[str] | None = None,
    where: str = "config",
    recipe: bool = True,
) -> None:
    found = violations(problem, config, module_order, recipe)
    if found:
        raise UsageError(f"{where} breaks a rule: {found[0]}")
