"""Where optimum-graphcore's `parallelize()` can begin a pipeline stage, and what it checkpoints.

`--trainer optimum` trains what IPUTrainer places from an IPUConfig, so the search, the
baseline and the export only use placements that code makes (huggingface/optimum-graphcore
main, the version pinning transformers 4.29.2):

- Stages begin at repeated layers only: `layers_per_ipu` assigns layers to IPUs
  (`optimum/graphcore/modeling_utils.py`, `get_layer_ipu`). The embeddings ride on IPU0;
  whatever sits between layers rides with the layer before it. For T5,
  `PipelinedT5ForConditionalGeneration.parallelize` (`models/t5/modeling_t5.py`, training, not
  `for_generation`) counts encoder blocks then decoder blocks as one list
  (`get_layer_ipu(self.ipu_config, num_encoder_layers + num_decoder_layers)`), puts each
  stack's `final_layer_norm` on its last block's IPU and the LM head on IPU 0.
- A newcomer's IPUConfig leaves `layers_per_ipu = [-1]`: the same number of layers per IPU,
  the remainder on the last (`_expand_layers_per_ipu_wildcard`).
- `recompute_checkpoint_every_layer` checkpoints each layer but the one some layer loop of
  the class's `parallelize` tests out (`index != config.<count> - 1`), per class, not per
  tied head: `SKIPPED_INDEX` below, each entry citing the file and function.
"""

from __future__ import annotations

from functools import lru_cache

from ..problem import Problem
from ..profiles.trace import ModelProfile

#: families whose pipelined class puts the LM head on IPU 0 whether or not it is tied
#: (PipelinedT5ForConditionalGeneration.parallelize: BeginBlock(self.lm_head, ..., ipu_id=0))
HEAD_ON_IPU0 = ("t5",)
#: the image classifiers optimum-graphcore pipelines (models/vit: ViTForImageClassification only)
IMAGE_FAMILIES = ("vit",)


@lru_cache(maxsize=32)
def _layer_units(model: str, task: str, paths: tuple[str, ...]) -> tuple[int, ...]:
    from ..models import hf

    stacks = hf.layer_stacks(model, task)
    return tuple(i for i, p in enumerate(paths)
                 if p.rsplit(".", 1)[0] in stacks and p.rsplit(".", 1)[-1].isdigit())


def layer_units(problem: Problem, profile: ModelProfile) -> list[int]:
    """Indices of the units that are layers in IPUConfig's sense (what layers_per_ipu counts)."""
    from ..models import hf

    if hf.is_hf(problem.model):
        return list(_layer_units(problem.model, problem.task, tuple(u.path for u in profile.units)))
    return list(range(len(profile.units)))


def stage_candidates(problem: Problem, profile: ModelProfile) -> list[int] | None:
    """Units a stage may begin at under --trainer optimum (a layer, not the first unit);
    None for the PopTorch target, where any unit may."""
    if problem.trainer != "optimum":
        return None
    return [i for i in layer_units(problem, profile) if i > 0]


def wildcard_cuts(problem: Problem, profile: ModelProfile, ipus: int) -> list[int]:
    """IPUConfig(layers_per_ipu=[-1]) over `ipus` IPUs as stage-starting units: the same
    number of layers per IPU, the remainder on the last (_expand_layers_per_ipu_wildcard)."""
    layers = layer_units(problem, profile)
    quotient = len(layers) // ipus
    return [layers[k * quotient] for k in range(1, ipus)]


def _family(model: str) -> str:
    from ..models import hf

    return hf.architecture(model).family if hf.is_hf(model) else ""


#: recompute_checkpoint_every_layer per pipelined class (optimum_target.PIPELINED): the config
#: attribute `count` of the `index != self.config.<count> - 1` test with which every layer loop
#: of the class's parallelize() skips a layer's checkpoint (optimum/graphcore/models/), or None
#: where parallelize() checkpoints every layer. Encoder-decoders run the same test, with the
#: encoder's count, in the encoder's and the decoder's loop, so the decoder layer with that index
#: (if any) goes unchecked too; a decoder with fewer layers keeps them all.
SKIPPED_INDEX: dict[tuple[str, str], str | None] = {
    # bert/modeling_bert.py: BertPipelineMixin.parallelize (classification, QA);
    # PipelinedBertForMaskedLM.parallelize has no test
    ("bert", "sequence-classification"): "num_hidden_layers",
    ("bert", "question-answering"): "num_hidden_layers",
    ("bert", "masked-lm"): None,
    # roberta/modeling_roberta.py: RobertaPipelineMixin.parallelize;
    # PipelinedRobertaForMaskedLM.parallelize has no test
    ("roberta", "sequence-classification"): "num_hidden_layers",
    ("roberta", "question-answering"): "num_hidden_layers",
    ("roberta", "masked-lm"): None,
    # distilbert/modeling_distilbert.py: DistilBertPipelineMixin.parallelize places and checkpoints
    # the layers for all three; PipelinedDistilBertForMaskedLM.parallelize calls it and only
    # places the LM head (DistilBertConfig: num_hidden_layers is n_layers)
    ("distilbert", "sequence-classification"): "num_hidden_layers",
    ("distilbert", "question-answering"): "num_hidden_layers",
    ("distilbert", "masked-lm"): "num_hidden_layers",
    # deberta/modeling_deberta.py: DebertaPipelineMixin.parallelize for all three;
    # PipelinedDebertaForMaskedLM has no parallelize of its own
    ("deberta", "sequence-classification"): "num_hidden_layers",
    ("deberta", "question-answering"): "num_hidden_layers",
    ("deberta", "masked-lm"): "num_hidden_layers",
    # gpt2/modeling_gpt2.py: PipelinedGPT2LMHeadModel.parallelize has no test;
    # GPT2PipelineMixin.parallelize (PipelinedGPT2ForSequenceClassification) has it (n_layer)
    ("gpt2", "causal-lm"): None,
    ("gpt2", "sequence-classification"): "num_hidden_layers",
    # bart/modeling_bart.py: PipelinedBartForConditionalGeneration.parallelize, encoder and decoder
    # loops alike; BartConfig sets num_hidden_layers = encoder_layers
    ("bart", "seq2seq-lm"): "encoder_layers",
    # t5/modeling_t5.py: PipelinedT5ForConditionalGeneration.parallelize; mt5/modeling_mt5.py:
    # PipelinedMT5ForConditionalGeneration.parallelize; both loops, num_layers (the encoder's)
    ("t5", "seq2seq-lm"): "num_layers",
    ("mt5", "seq2seq-lm"): "num_layers",
    # vit/modeling_vit.py: PipelinedViTForImageClassification.parallelize has no test
    ("vit", "image-classification"): None,
}


def unchecked_layers(profile: ModelProfile, layers: list[str]) -> set[str]:
    """The layers recompute_checkpoint_every_layer leaves without a checkpoint (SKIPPED_INDEX)."""
    family = _family(profile.model)
    if (family, profile.task) in SKIPPED_INDEX:
        count = SKIPPED_INDEX[family, profile.task]
        if count is None:
            return set()
        from ..models.hf import model_config

        last = str(getattr(model_config(profile.model), count) - 1)
        return {p for p in layers if p.rsplit(".", 1)[-1] == last}
    # No pipelined class (optimum refuses the model: optimum_target.model_refusal) or a module
    # traced without its task: the common rule, the last layer unless a head is tied.
    tied = any(u.placed_with is not None for u in profile.units)
    if family in IMAGE_FAMILIES or tied or not layers:
        return set()
    return {layers[-1]}


def placement_refusals(problem: Problem, profile: ModelProfile) -> list[str]:
    """Placements optimum makes that the estimate does not: one line each."""
    out = []
    if _family(problem.model) in HEAD_ON_IPU0:
        head = next((u for u in profile.units if u.path == "lm_head"), None)
        if head is not None and head.placed_with is None:
            out.append("an untied T5 LM head: optimum places it on IPU 0 (PipelinedT5ForConditionalGeneration."
                       "parallelize) and the estimate on the last IPU")
    return out
