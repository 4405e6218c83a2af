"""The optimum-graphcore target (`--trainer optimum`): what `IPUTrainer` with an `IPUConfig`
can train, and the PopART options it compiles with (docs/transformers.md, "Training with
optimum-graphcore").

Read from huggingface/optimum-graphcore (main, the version that pins transformers 4.29.2):
`optimum/graphcore/ipu_configuration.py` (`IPUConfig._to_options`), `trainer.py`
(`IPUTrainer.__init__`, `create_optimizer`), `training_args.py` (`IPUTrainingArguments`) and
the models' `parallelize()`.
"""

from __future__ import annotations

# What the target can serialise is a knob's domain: the knob spec's (the search space asks it too).
from ..knob_conditions import projection_factors as serialization_factors
from ..problem import Config, Problem

#: the optimizers IPUTrainer.create_optimizer builds (poptorch.optim.AdamW; LAMB if `lamb=True`)
TRAINER_OPTIMIZERS = ("adamw", "lamb")

# IPUConfig._to_options (training), beyond the knobs a Config already carries. The PopTorch
# backend compiles these too when the target is optimum (trainer_option_lines), so a compile
# measures what IPUTrainer compiles.
POPART_OPTIONS: dict[str, object] = {
    "disableGradAccumulationTensorStreams": True,
    # popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized; IPU0 left out of the overlap
    "accumulateOuterFragmentSettings.schedule": 3,
    "accumulateOuterFragmentSettings.excludedVirtualGraphs": ["0"],
    "outlineThreshold": 10.0,
    "subgraphCopyingStrategy": 1,  # popart.SubgraphCopyingStrategy.JustInTime
    "scheduleNonWeightUpdateGradientConsumersEarly": True,
}
PATTERNS = {
    "TiedGather": True,
    "TiedGatherAccumulate": True,
    "UpdateInplacePrioritiesForIpu": True,
}
ENGINE_OPTIONS = {"opt.useAutoloader": "true", "target.syncReplicasIndependently": "true"}


def outer_fragment_params(problem: Problem, params_per_stage: list[float]) -> float:
    """Parameters whose weight update (and all-reduce) sets the outer fragment's time. The
    estimate has the IPUs update in parallel, so the busiest one counts; IPUTrainer's
    `accumulateOuterFragmentSettings.excludedVirtualGraphs = ["0"]` keeps IPU0 out of that
    overlap (OverlapMemoryOptimized for the rest), so IPU0's update comes on top."""
    if not is_optimum(problem) or len(params_per_stage) < 2:
        return max(params_per_stage)
    return params_per_stage[0] + max(params_per_stage[1:])


def trainer_option_lines(problem: Problem) -> list[str]:
    """--trainer optimum: these options as `opts` calls for the snippet (export/python.py), so
    that a compile of the snippet is a compile of what IPUTrainer runs. Fixed tables only."""
    if not is_optimum(problem):
        return []
    lines = [f"opts._Popart.set({k!r}, {v!r})" for k, v in POPART_OPTIONS.items()]
    lines.append(f"opts._Popart.setPatterns({PATTERNS!r})")
    lines.append(f'opts._Popart.set("engineOptions", {ENGINE_OPTIONS!r})')
    return ["# IPUTrainer's own PopART options (optimum-graphcore IPUConfig._to_options)", *lines]


def checkpoint_hook(problem: Problem) -> dict[str, str]:
    """How the snippet's `_checkpoint_output` checkpoints a layer that returns a tuple. Under
    --trainer optimum every tensor in it, as `recomputation_checkpoint` does
    (optimum/graphcore/modeling_utils.py; poptorch.recomputationCheckpoint flattens a nested
    tuple): GPT-2's block checkpoints its hidden state, key and value
    (profiles/optimum_placement.CHECKPOINTED_OUTPUTS). Otherwise the hidden state only."""
    if is_optimum(problem):
        # (a None where transformers' newer layers return one, e.g. DeBERTa's, passes through)
        return {
            "tuple_comment": "# every tensor, as optimum-graphcore's recomputation_checkpoint",
            "tuple_checkpoint": (
                "tuple(y if y is None else poptorch.recomputationCheckpoint(y) for y in output)"
            ),
        }
    return {
        "tuple_comment": "# Hugging Face layers return (hidden_states, ...)",
        "tuple_checkpoint": "(poptorch.recomputationCheckpoint(output[0]), *output[1:])",
    }


def is_optimum(problem: Problem) -> bool:
    return problem.trainer == "optimum"


#: (family, task) -> the transformers class optimum-graphcore pipelines for it, and the file of
#: optimum/graphcore/models/ whose `@register(cls)` puts it in `_PRETRAINED_TO_PIPELINED_REGISTRY`.
#: `to_pipelined` (optimum/graphcore/modeling_utils.py) looks the model's exact class up there;
#: any other class raises KeyError, or with `force_to_pipelined=True` gets the generic
#: `PipelineMixin.parallelize`, which places nothing (all on IPU0): not what was estimated.
#: Registered but not taken here: ConvNextForImageClassification (its layers nest in stages; the
#: placement rules are ViT's) and MPNetForMaskedLM (not checked against optimum_placement.py).
PIPELINED: dict[tuple[str, str], tuple[str, str]] = {
    ("bert", "sequence-classification"): (
        "BertForSequenceClassification",
        "bert/modeling_bert.py",
    ),
    ("bert", "masked-lm"): ("BertForMaskedLM", "bert/modeling_bert.py"),
    ("bert", "question-answering"): ("BertForQuestionAnswering", "bert/modeling_bert.py"),
    ("roberta", "sequence-classification"): (
        "RobertaForSequenceClassification",
        "roberta/modeling_roberta.py",
    ),
    ("roberta", "masked-lm"): ("RobertaForMaskedLM", "roberta/modeling_roberta.py"),
    ("roberta", "question-answering"): (
        "RobertaForQuestionAnswering",
        "roberta/modeling_roberta.py",
    ),
    ("distilbert", "sequence-classification"): (
        "DistilBertForSequenceClassification",
        "distilbert/modeling_distilbert.py",
    ),
    ("distilbert", "masked-lm"): ("DistilBertForMaskedLM", "distilbert/modeling_distilbert.py"),
    ("distilbert", "question-answering"): (
        "DistilBertForQuestionAnswering",
        "distilbert/modeling_distilbert.py",
    ),
    # DeBERTa v1 only (model_type "deberta"): nothing registers a DebertaV2 class
    ("deberta", "sequence-classification"): (
        "DebertaForSequenceClassification",
        "deberta/modeling_deberta.py",
    ),
    ("deberta", "masked-lm"): ("DebertaForMaskedLM", "deberta/modeling_deberta.py"),
    ("deberta", "question-answering"): (
        "DebertaForQuestionAnswering",
        "deberta/modeling_deberta.py",
    ),
    ("gpt2", "causal-lm"): ("GPT2LMHeadModel", "gpt2/modeling_gpt2.py"),
    ("gpt2", "sequence-classification"): (
        "GPT2ForSequenceClassification",
        "gpt2/modeling_gpt2.py",
    ),
    ("bart", "seq2seq-lm"): ("BartForConditionalGeneration", "bart/modeling_bart.py"),
    ("t5", "seq2seq-lm"): ("T5ForConditionalGeneration", "t5/modeling_t5.py"),
    ("mt5", "seq2seq-lm"): ("MT5ForConditionalGeneration", "mt5/modeling_mt5.py"),
    ("vit", "image-classification"): ("ViTForImageClassification", "vit/modeling_vit.py"),
}


def pipelined_families() -> str:
    """What the optimum target takes, in one line: family (tasks)."""
    taken: dict[str, list[str]] = {}
    for family, task in PIPELINED:
        taken.setdefault(family, []).append(task)
    return "; ".join(f"{family} ({', '.join(tasks)})" for family, tasks in taken.items())


def model_refusal(problem: Problem) -> str | None:
    """Why IPUTrainer cannot train this model at all (None when it can): it pipelines the hf:
    (family, task) pairs of PIPELINED only."""
    from ..models import hf
    from ..models.hf_config import task_class

    if not hf.is_hf(problem.model):
        return "IPUTrainer trains hf: models (optimum-graphcore's pipelined models)"
    family = hf.architecture(problem.model).family
    if (family, problem.task) in PIPELINED:
        return None
    name = task_class(family, problem.task) or "class"
    return (
        f"optimum-graphcore pipelines no {family} {problem.task} model: no pipelined {name} is "
        "registered (to_pipelined, optimum/graphcore/modeling_utils.py); it pipelines "
        f"{pipelined_families()}"
    )


def trainer_precision(config: Config) -> bool:
    """IPUTrainer halves the model unless `fp32=True` (trainer.py, IPUTrainer.__init__), and
    keeps the optimizer's accumulator and first moment in FP16 unless fp32 (create_optimizer):
    True when the config is one of those two."""
    if config.precision == "16.16":
        return config.optimizer_state == "half"
    return config.precision == "32.32" and config.optimizer_state == "float"


def unexpressible(problem: Problem, config: Config) -> list[str]:
    """Why IPUTrainer + IPUConfig would not train `config` as estimated (empty: it would)."""
    from ..profiles.placement import is_layer, optimum_checkpoints
    from ..profiles.trace import profile_for

    c = config
    out = []
    refusal = model_refusal(problem)
    if refusal:
        return [refusal]
    if c.eight_bit_io:
        out.append(
            "8-bit image I/O: IPUTrainer feeds the collator's float pixel_values (no uint8 input "
            "normalised on the IPU)"
        )
    if problem.optimizer not in TRAINER_OPTIMIZERS:
        out.append(
            f"optimizer {problem.optimizer}: IPUTrainer builds AdamW or LAMB (trainer.py, "
            "create_optimizer)"
        )
    if c.execution == "sharded" and c.ipus_per_replica > 1:
        out.append(
            "sharded execution: IPUConfig always trains pipelined (IPUConfig._to_options: "
            "PipelinedExecution), so the accumulation must cover 2 x stages - 1"
        )
    if not trainer_precision(c):
        out.append(
            f"precision {c.precision} with {c.optimizer_state} optimizer state: IPUTrainer "
            "trains FP16 weights with FP16 accumulators and first moment, or (fp32=True) FP32 "
            "throughout"
        )
    if c.half_weights and not c.stochastic_rounding:
        out.append("stochastic rounding off: IPUConfig always enables it for training")
    if c.io_tiles:
        out.append("I/O tiles: IPUConfig has no numIOTiles")
    default = "pipeline" if c.pipelined else "none"
    if c.effective_recompute != default:
        out.append(
            f"recompute {c.recompute}: IPUConfig leaves PopTorch's default ({default} here)"
        )
    elif c.checkpoints and c.effective_recompute == "pipeline":
        out += _checkpoint_refusal(c.checkpoints, optimum_checkpoints(profile_for(problem)))
    if c.pipelined:
        others = [p for p in c.splits if not is_layer(p)]
        if others:
            out.append(
                f"split at {', '.join(others)}: IPUConfig's layers_per_ipu splits at layers only"
            )
    if c.embedding_serialization not in serialization_factors(problem, optimum=True):
        out.append(
            f"embedding_serialization {c.embedding_serialization}: optimum's SerializedLinear "
            "does not pad this vocabulary and PopART refuses a factor that does not divide it"
        )
    return out


def _checkpoint_refusal(checkpoints: tuple[str, ...], theirs: tuple[str, ...]) -> list[str]:
    """Why `checkpoints` are not the ones parallelize() registers under
    recompute_checkpoint_every_layer (`theirs`, placement.optimum_checkpoints); empty if equal."""
    if tuple(checkpoints) == theirs:
        return []
    from ..profiles.placement import is_layer

    others = [p for p in checkpoints if p not in theirs]
    missing = [p for p in theirs if p not in checkpoints]
    if others:
        where = (
            "not a layer"
            if not all(map(is_layer, others))
            else "a layer parallelize() leaves unchecked"
        )
        what = f"checkpoints on {', '.join(others)} ({where})"
    else:
        what = (
            f"checkpoints on {len(checkpoints)} of the {len(theirs)} layers parallelize() "
            f"checkpoints (not on {', '.join(missing)})"
        )
    return [
        f"{what}: IPUConfig's recompute_checkpoint_every_layer checkpoints all {len(theirs)}, "
        "a stage's last layer too, or none"
    ]
