"""Both exports of one trial, read back into the same terms (issue 24, must show 2).

`read_ipu_config` interprets an `ipu_config.json` the way optimum-graphcore's parallelize()
would place the model (huggingface/optimum-graphcore main): `get_layer_ipu` /
`_expand_layers_per_ipu_wildcard` (optimum/graphcore/modeling_utils.py) for the layers,
embeddings on IPU0, a tied head on IPU0 (PipelinedBertForMaskedLM, PipelinedRobertaForMaskedLM,
PipelinedGPT2LMHeadModel: `BeginBlock(..., ipu_id=0)`), other heads on the last IPU
(`last_ipu = ipus_per_replica - 1`), checkpoints on every layer but those the class's loops
test out (`index != config.<count> - 1`, the per-class table SKIPPED_INDEX of
profiles/optimum_placement.py); `read_module_ipus` places every module, with what each class pins
to IPU0 (PINNED_TO_IPU0),
`matmul_proportion` per IPU, `embedding_serialization_factor` on the head's projection
(SerializedLinear) for the language-model classes.

`read_snippet` runs the PopTorch snippet on the fake SDK and reads what PopTorch saw: each
BeginBlock's IPU, the checkpoint hooks, the options' memory proportions, the serialised matmuls.

Both are then normalised the same way: a checkpoint on a layer whose output leaves its IPU
changes nothing (the stage's output is stashed for its copy anyway), so it is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Placement:
    layer_ipu: tuple[int, ...]  # IPU of each layer, in order
    head_ipu: int
    checkpointed: frozenset[int]  # layer indices whose output is a recomputation checkpoint
    amp: tuple[float, ...]
    serialization: int
    other_checkpoints: frozenset[str] = frozenset()  # checkpoints on modules that are not layers


def _normalised(layer_ipu: Any, head_ipu: Any, checkpointed: Any) -> frozenset[int]:
    nxt = list(layer_ipu[1:]) + [head_ipu]
    return frozenset(i for i in checkpointed if layer_ipu[i] == nxt[i])


def skipped_layers(problem: Any, layers: list[str]) -> set[int]:
    """Indices (in `layers`) of the layers recompute_checkpoint_every_layer leaves unchecked: the
    class's loops test `index != self.config.<count> - 1` per stack, with the count of the
    per-class table (profiles/optimum_placement.py, SKIPPED_INDEX; None: every layer checked)."""
    from ipu_autotune.models.hf import architecture, model_config
    from ipu_autotune.profiles.optimum_placement import SKIPPED_INDEX

    count = SKIPPED_INDEX[architecture(problem.model).family, problem.task]
    if count is None:
        return set()
    last = getattr(model_config(problem.model), count) - 1
    stacks: dict[str, list[int]] = {}
    for i, path in enumerate(layers):
        stacks.setdefault(path.rsplit(".", 1)[0], []).append(i)
    return {members[last] for members in stacks.values() if last < len(members)}


def read_ipu_config(
    data: dict[str, Any], problem: Any, layers: list[str], tied_head: bool
) -> Placement:
    """`layers`: the model's layer paths in order; `tied_head`: the head optimum pins to IPU0."""
    n_layers = len(layers)
    per_ipu = data["layers_per_ipu"]
    ipus = data["ipus_per_replica"]
    assert len(per_ipu) == ipus and sum(per_ipu) == n_layers, (
        "IPUConfig/_expand_layers_per_ipu_wildcard refuses it"
    )
    assert len(data["matmul_proportion"]) == ipus, "IPUConfig._validate_ipu_config refuses it"
    layer_ipu = tuple(ipu for ipu, n in enumerate(per_ipu) for _ in range(n))
    head_ipu = 0 if tied_head else ipus - 1
    checkpointed: set[int] = set()
    if data["recompute_checkpoint_every_layer"]:
        checkpointed = set(range(n_layers)) - skipped_layers(problem, layers)
    return Placement(
        layer_ipu,
        head_ipu,
        _normalised(layer_ipu, head_ipu, checkpointed),
        tuple(data["matmul_proportion"]),
        data["embedding_serialization_factor"],
    )


#: What parallelize() puts on IPU 0 with BeginBlock(..., ipu_id=0) besides the embeddings, read off
#: optimum/graphcore/models/ (huggingface/optimum-graphcore main) for the classes tested:
#: bart/modeling_bart.py PipelinedBartForConditionalGeneration.parallelize (decoder embed_positions
#: and layernorm_embedding, "Embedding"; lm_head); distilbert/modeling_distilbert.py
#: PipelinedDistilBertForMaskedLM.parallelize (vocab_transform, vocab_layer_norm, vocab_projector,
#: "LM Head"); deberta/modeling_deberta.py DebertaPipelineMixin.parallelize (for the MLM class,
#: cls.predictions.decoder only, "Projection").
PINNED_TO_IPU0 = {
    ("bart", "seq2seq-lm"): (
        "model.decoder.embed_positions",
        "model.decoder.layernorm_embedding",
        "lm_head",
    ),
    ("distilbert", "masked-lm"): ("vocab_transform", "vocab_layer_norm", "vocab_projector"),
    ("deberta", "masked-lm"): ("cls.predictions.decoder",),
}


def read_module_ipus(
    data: dict[str, Any], problem: Any, modules: list[str], layers: list[str]
) -> dict[str, int]:
    """The IPU of each module (paths in the order they run) as parallelize() places them from
    this IPUConfig: layers by layers_per_ipu (get_layer_ipu), the first module (the embeddings)
    and PINNED_TO_IPU0 on IPU 0, and anything else where the last BeginBlock left it (the
    layer before it: PopTorch places ops on the current block's IPU)."""
    from ipu_autotune.models.hf import architecture

    pinned = PINNED_TO_IPU0[architecture(problem.model).family, problem.task]
    layer_ipu = dict(
        zip(
            layers,
            (ipu for ipu, n in enumerate(data["layers_per_ipu"]) for _ in range(n)),
            strict=True,
        )
    )
    out, ipu = {}, 0
    for path in modules:
        if path in layer_ipu:
            ipu = layer_ipu[path]
        elif any(path == p or path.startswith(p + ".") for p in pinned):
            ipu = 0
        out[path] = ipu
    return out


def read_snippet(
    poptorch: Any, snippet: str, model: Any, layers: list[str], head: str, batch: Any
) -> tuple[Placement, Any]:
    """(placement, options) of the snippet's TrainingModel as the fake PopTorch compiles it (the
    fake SDK is untyped, as the SDK is)."""
    from poptorch import ops

    ns: dict[str, Any] = {}
    exec(compile(snippet, "best_options.py", "exec"), ns)
    training_model = ns["TrainingModel"](model)
    opts = ns["make_options"]().useOfflineIpuTarget()  # compile only, as the PopTorch backend does
    training = poptorch.trainingModel(training_model, opts, ns["make_optimizer"](training_model))
    try:
        training.compile(*batch)
    except poptorch.Error as exc:  # out of memory still says what PopTorch understood
        if "Out of memory" not in str(exc):
            raise
    starts = {
        path.removeprefix("model."): hook._ipu_id
        for path, hook in ops.block_annotations(training_model)
    }
    ipu, placed = 0, {}
    for path, _ in training_model.model.named_modules():  # modules in the order they run
        ipu = starts.get(path, ipu)
        placed[path] = ipu
    layer_ipu = tuple(placed[p] for p in layers)
    checkpoint_paths = {p.removeprefix("model.") for p in ops.checkpointed_modules(training_model)}
    checkpointed = {i for i, p in enumerate(layers) if p in checkpoint_paths}
    record = training.fake_record["config"]
    n_ipus = max(placed.values()) + 1
    amp = tuple(float(opts.available_memory_proportion.get(i, 0.6)) for i in range(n_ipus))
    others = frozenset(checkpoint_paths - set(layers))
    return Placement(
        layer_ipu,
        placed[head],
        _normalised(layer_ipu, placed[head], checkpointed),
        amp,
        record.embedding_serialization,
        others,
    ), opts


def token_batch(problem: Any, config: Any) -> Any:
    from ipu_autotune.backends.poptorch import child

    return child.host_batch(problem, config, torch.float)
