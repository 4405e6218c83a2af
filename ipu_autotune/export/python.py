"""The ready-to-paste PopTorch snippet for a configuration.

The PopTorch backend compiles each trial by executing this very snippet in its child
process, so the code a user pastes is the code that was compiled. Only validated values
reach the generated source (literals.py); choices come from fixed tables. The TrainingModel of
a model fed tokens or named inputs is training_model.py's.
"""

from __future__ import annotations

from ..problem import DEFAULT_AMP, Config, Problem
from ..rules.optimum_target import checkpoint_hook, trainer_option_lines
from ..version import __version__
from .literals import comment_lines, float_literal, int_literal, path_literal
from .serialization import serialization_code, serialization_lines
from .training_model import training_model

# PopART RecomputationType (popart sessionoptions.hpp): values and names.
RECOMPUTATION_TYPE = {"none": 0, "standard": 1, "norm_only": 2, "pipeline": 3, "all": 4}
_RECOMPUTE_NAME = {
    "none": "NoRecompute",
    "standard": "Standard",
    "norm_only": "NormOnly",
    "pipeline": "Pipeline",
    "all": "RecomputeAll",
}
#: the loss scale automatic loss scaling starts from
ALS_INITIAL_SCALE = 128.0


def options_lines(config: Config) -> list[str]:
    """Every non-default knob as a call on `opts`, in PopTorch's own API."""
    c = config
    lines: list[str] = []
    if c.device_iterations != 1:
        lines.append(f"opts.deviceIterations({int_literal(c.device_iterations)})")
    if c.replicas != 1:
        lines.append(f"opts.replicationFactor({int_literal(c.replicas)})")
    if (
        c.reserved_ipus != c.total_ipus
    ):  # else PopTorch refuses a count not a power of two on hardware
        lines.append(
            f"opts.autoRoundNumIPUs(True)  # reserves {c.reserved_ipus} IPUs for these "
            f"{c.total_ipus}"
        )
    if c.gradient_accumulation != 1:
        lines.append(f"opts.Training.gradientAccumulation({int_literal(c.gradient_accumulation)})")
    # One IPU has no stages: an execution strategy would say nothing (overlapped I/O, which
    # PipelinedExecution refuses, is not set by this snippet).
    if c.ipus_per_replica > 1:
        if c.execution == "pipelined":
            lines.append(
                "opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))"
            )
        else:
            lines.append(
                "opts.setExecutionStrategy(poptorch.ShardedExecution(poptorch.AutoStage.SameAsIpu))"
            )
    amp = c.available_memory_proportion
    if any(a != DEFAULT_AMP for a in amp):
        entries = ", ".join(f'"IPU{i}": {float_literal(a)}' for i, a in enumerate(amp))
        lines.append(f"opts.setAvailableMemoryProportion({{{entries}}})")
    if c.half_compute and c.partials == "half":
        lines.append("opts.Precision.setPartialsType(torch.half)")
    if c.stochastic_rounding:
        lines.append("opts.Precision.enableStochasticRounding(True)")
    if c.loss_scaling == "auto":
        lines.append("opts.Training.setAutomaticLossScaling(True)")
    if c.recompute != "default":
        mode = c.recompute
        if not c.pipelined and mode in ("standard", "norm_only", "all"):
            # Single-IPU recomputation needs explicit mode (Graphcore's CNN example does this).
            lines.append('opts._Popart.set("explicitRecomputation", True)')
        lines.append(
            f'opts._Popart.set("autoRecomputation", {RECOMPUTATION_TYPE[mode]})  '
            f"# RecomputationType.{_RECOMPUTE_NAME[mode]}"
        )
    if c.optimizer_offload or c.replicated_tensor_sharding:
        chain = "poptorch.TensorLocationSettings()"
        if c.optimizer_offload:
            chain += ".useOnChipStorage(False)"
        if c.replicated_tensor_sharding:
            chain += ".useReplicatedTensorSharding(True)"
        lines.append(f"opts.TensorLocations.setOptimizerLocation({chain})")
    if c.io_tiles:
        lines.append(f"opts.TensorLocations.numIOTiles({int_literal(c.io_tiles)})")
    return lines


def config_notes(problem: Problem, config: Config) -> list[str]:
    """What this config does that the code alone does not say, generated from the config
    itself so that the comments cannot disagree with the code below them."""
    c = config
    notes = []
    if c.loss_scaling == "auto":
        notes.append(f"Loss scaling: automatic, starting at {ALS_INITIAL_SCALE:g}.")
    elif c.loss_scaling != 1.0:
        notes.append(f"Loss scaling: fixed at {c.loss_scaling:g}.")
    if c.half_compute:
        notes.append(
            f"Partials: {c.partials}."
            + (" Stochastic rounding on." if c.stochastic_rounding else "")
        )
    if c.optimizer_state == "half" and problem.optimizer != "sgd_combined":
        # poptorch/_optimizer_attributes.py: FP16 accumulators make PopTorch pick the Running
        # mean-reduction strategy (no separate divide at the end of the accumulation).
        notes.append("FP16 optimizer state: PopTorch switches the mean reduction to Running.")
    return notes


def optimizer_call(problem: Problem, config: Config) -> str:
    c = config
    state = "torch.float16" if c.optimizer_state == "half" else "torch.float32"
    scale = ALS_INITIAL_SCALE if c.loss_scaling == "auto" else c.loss_scaling
    args = ["model.parameters()", "lr=lr"]
    if scale != 1.0:
        args.append(f"loss_scaling={float_literal(scale)}")
    opt = problem.optimizer
    if opt in ("sgd", "sgd_combined"):
        cls = "SGD"
        args.append("momentum=0.9")
        if opt == "sgd_combined":
            args.append("use_combined_accum=True")
        else:
            args += [f"accum_type={state}", f"velocity_accum_type={state}"]
    else:
        cls = {"adam": "Adam", "adamw": "AdamW", "lamb": "LAMB", "rmsprop": "RMSprop"}[opt]
        args += [
            f"accum_type={state}",
            f"first_order_momentum_accum_type={state}",
            "second_order_momentum_accum_type=torch.float32",
        ]
    return f"poptorch.optim.{cls}({', '.join(args)})"


def annotate_lines(config: Config) -> list[str]:
    c = config
    lines: list[str] = []
    if c.precision == "16.16":
        lines.append("model.half()  # 16.16: FP16 weights and activations")
    for ipu, path in enumerate(c.splits, start=1):
        lines.append(
            f"poptorch.BeginBlock(model.get_submodule({path_literal(path)}), ipu_id={ipu})"
        )
    for path in c.checkpoints:
        lines.append(
            f"model.get_submodule({path_literal(path)}).register_forward_hook(_checkpoint_output)"
        )
    return lines


_HEADER = '''\
"""PopTorch configuration found by ipu-autotune {version}.

Usage:
    model = TrainingModel(my_model)          # adds the loss{eight_bit_usage}
    opts = make_options()
    training_model = poptorch.trainingModel(model, opts, make_optimizer(model))
    loader = make_loader(opts, dataset)      # {samples_per_call:,} samples per call
"""
{summary}
import torch
import poptorch

MICRO_BATCH = {micro_batch}
{input_dtype}LOADER_WORKERS = {loader_workers}
'''

_EIGHT_BIT = '''

class NormalizeInput(torch.nn.Module):
    """uint8 images in, normalised on the IPU: a quarter of the host I/O of float32."""

    def __init__(self, model, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)):
        super().__init__()
        self.model = model
        # In the model's input dtype, so that FP16 models get FP16 activations.
        self.register_buffer("mean", (torch.tensor(mean) * 255.0).view(1, -1, 1, 1).to(INPUT_DTYPE))
        self.register_buffer("std", (torch.tensor(std) * 255.0).view(1, -1, 1, 1).to(INPUT_DTYPE))

    def forward(self, x):
        return self.model((x.to(INPUT_DTYPE) - self.mean) / self.std)
'''  # noqa: E501 (the generated file's own lines, as written out)

_BODY = '''

def _checkpoint_output(module, inputs, output):
    if isinstance(output, tuple):  {tuple_comment}
        return {tuple_checkpoint}
    return poptorch.recomputationCheckpoint(output)


def annotate(model):
    """Precision, pipeline stages and recomputation checkpoints, in place."""{annotate}
    return model


class TrainingModel(torch.nn.Module):
    """PopTorch training models return the loss from forward."""

    def __init__(self, model):
        super().__init__()
        self.model = {wrapped}
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, labels=None):
        if x.is_floating_point():
            x = x.to(INPUT_DTYPE)
        out = self.model(x)
        out = getattr(out, "logits", out)  # Hugging Face style output objects
        if labels is None:
            return out
        return out, self.loss(out.float(), labels)


def make_options():
    opts = poptorch.Options(){options}
    return opts


def make_optimizer(model, lr={lr}):{lr_comment}
    return {optimizer}


def make_loader(opts, dataset):
    """One call takes MICRO_BATCH x accumulation x replicas x device iterations samples."""{loader_comment}
    return poptorch.DataLoader(opts, dataset, batch_size=MICRO_BATCH, shuffle=True, drop_last=True,
                               num_workers=LOADER_WORKERS, mode=poptorch.DataLoaderMode.{loader_mode})
'''  # noqa: E501 (the generated file's own lines, as written out)

# make_loader's note when the dataset yields uint8 images
_EIGHT_BIT_LOADER = (
    "\n    # 8-bit I/O: the dataset yields uint8 images (no ToTensor float cast, no Normalize"
    " on the\n    # host); NormalizeInput casts and normalises on the IPU."
)


def _indent(lines: list[str]) -> str:
    return "\n".join("    " + line for line in lines)


def learning_rate(
    problem: Problem, config: Config, base_global_batch: int | None
) -> tuple[str, str]:
    """make_optimizer's default rate, and the comment giving the base rate and the rule."""
    from ..host import pipeline, recipe

    base = recipe.base_lr(problem)
    scaled = recipe.scaling(
        problem.optimizer, base, base_global_batch, pipeline.global_batch(problem, config)
    )
    if scaled is None:
        return repr(base), ""
    return (
        float_literal(scaled.lr),
        f"\n    # Base rate {base:g} at global batch {scaled.base_global_batch}; this config "
        f"trains at {scaled.global_batch},\n    # {scaled.rule} rule for {problem.optimizer}: "
        f"{scaled.formula()}.",
    )


def tied_head_lines(problem: Problem, config: Config) -> list[str]:
    """hf: models: what runs back on IPU0 (profiles/placement.head_blocks: a tied head with its
    embedding, as optimum-graphcore's parallelize() places it, PipelinedBertForMaskedLM:
    `BeginBlock(self.cls, "Classifier", ipu_id=0)`; under --trainer optimum, what it pins)."""
    from ..profiles.placement import head_blocks

    return [
        f"poptorch.BeginBlock(model.get_submodule({path_literal(path)}), ipu_id={ipu})  # "
        + ("on IPU0 with the embedding" if ipu == 0 else "back from IPU0")
        for path, ipu in (head_blocks(problem, config) if config.pipelined else [])
    ]


def model_check_lines(problem: Problem) -> list[str]:
    """What the estimate assumed of the user's model: set where the code can
    (hf.model_settings), else checked."""
    from ..models.hf import attention_dropout_key, model_settings

    if problem.attention_dropout is None:
        return model_settings(problem)
    key = attention_dropout_key(problem.model)
    return model_settings(problem) + [
        f"assert model.config.{key} == {problem.attention_dropout!r}, "
        f'"estimated with attention dropout {problem.attention_dropout:g} '
        f'(--attention-dropout): set {key}"'
    ]


def render_snippet(
    problem: Problem, config: Config, summary: str = "", base_global_batch: int | None = None
) -> str:
    from ..host import pipeline

    if config.eight_bit_io:
        halves = ", ".join(["0.5"] * problem.input_shape[0])
        norm_args = "" if problem.input_shape[0] == 3 else f", mean=({halves},), std=({halves},)"
        wrapped = f"NormalizeInput(annotate(model){norm_args})"
    else:
        wrapped = "annotate(model)"
    lr, lr_comment = learning_rate(problem, config, base_global_batch)
    source = _HEADER.format(
        version=__version__,
        summary=comment_lines("\n".join(filter(None, [summary, *config_notes(problem, config)]))),
        micro_batch=int_literal(pipeline.micro_batch(problem, config)),
        # Token ids stay integers: hf: models have no input dtype to cast to.
        input_dtype=""
        if problem.token_inputs
        else f"INPUT_DTYPE = {'torch.half' if config.half_compute else 'torch.float'}\n",
        eight_bit_usage="\n    # feed uint8 images: normalisation runs on the IPU"
        if config.eight_bit_io
        else "",
        samples_per_call=pipeline.samples_per_call(problem, config),
        loader_workers=int_literal(config.loader_workers),
    )
    if config.eight_bit_io:
        source += _EIGHT_BIT
    source += serialization_code(config)
    heads = tied_head_lines(problem, config)
    # Serialisation first: padding a vocabulary resizes the embeddings, which older transformers
    # do by replacing the modules that BeginBlock annotations would already have wrapped.
    annotations = (
        model_check_lines(problem)
        + serialization_lines(problem, config)
        + annotate_lines(config)
        + heads
    )
    # --trainer optimum: IPUTrainer's options too
    options = options_lines(config) + trainer_option_lines(problem)
    if heads:  # stages follow the blocks' order, so the head on IPU0 is a stage of its own
        options = [
            line.replace("AutoStage.SameAsIpu", "AutoStage.AutoIncrement") for line in options
        ]
    source += _BODY.format(
        annotate="\n" + _indent(annotations) if annotations else "",
        wrapped=wrapped,
        options="\n" + _indent(options) if options else "",
        lr=lr,
        lr_comment=lr_comment,
        optimizer=optimizer_call(problem, config),
        loader_mode={"sync": "Sync", "async": "Async"}[config.loader_mode],
        **checkpoint_hook(problem),
        loader_comment=_EIGHT_BIT_LOADER if config.eight_bit_io else "",
    )
    if problem.token_inputs or problem.inputs:
        start = source.index("class TrainingModel(torch.nn.Module):")
        source = (
            source[:start]
            + training_model(problem)
            + source[source.index("def make_options():") :]
        )
    compile(source, "best_options.py", "exec")  # never hand out code that does not parse
    return source
