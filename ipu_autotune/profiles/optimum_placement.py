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
  tied head: `SKIPPED_INDEX` below, each entry citing the file and function. A stage's last
  layer is checkpointed too, and each checkpoint keeps every tensor its layer returns
  (`CHECKPOINTED_OUTPUTS`: GPT-2's key and value with its hidden state).
- Besides the embeddings, some classes pin modules to IPU 0 with `BeginBlock(..., ipu_id=0)`
  (an LM head, BART's decoder position embedding); every op after such a block runs on IPU 0
  until the next layer's block. `ON_IPU0` below lists them per class and `optimum_placed` puts
  those units (and only those) on IPU 0 in the estimate: `profile_for` applies it to every
  --trainer optimum profile, so stages, memory, time, the rules and the snippet all see it.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from ..problem import Problem
from .model_profile import ModelProfile  # not trace.py: trace.profile_for applies optimum_placed

#: the image classifiers optimum-graphcore pipelines (models/vit: ViTForImageClassification only)
IMAGE_FAMILIES = ("vit",)


@lru_cache(maxsize=32)
def _layer_units(model: str, task: str, paths: tuple[str, ...]) -> tuple[int, ...]:
    from ..models import hf

    stacks = hf.layer_stacks(model, task)
    return tuple(
        i
        for i, p in enumerate(paths)
        if p.rsplit(".", 1)[0] in stacks and p.rsplit(".", 1)[-1].isdigit()
    )


def layer_units(problem: Problem, profile: ModelProfile) -> list[int]:
    """Indices of the units that are layers in IPUConfig's sense (what layers_per_ipu counts)."""
    from ..models import hf

    if hf.is_hf(problem.model):
        return list(
            _layer_units(problem.model, problem.task, tuple(u.path for u in profile.units))
        )
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


#: Tensors each checkpointed layer returns under IPUTrainer, in hidden states (each the size of the
#: layer's output): `recomputation_checkpoint` (optimum/graphcore/modeling_utils.py) checkpoints
#: every element of a tuple output, and poptorch.recomputationCheckpoint flattens a nested tuple,
#: so each returned tensor is one checkpoint PopART keeps. Read in the transformers optimum pins
#: (4.29.2; newer ones return a tensor where 4.29.2 returns a tuple), training, no attention
#: weights asked for:
CHECKPOINTED_OUTPUTS: dict[tuple[str, str], int] = {
    # BertLayer, RobertaLayer, DebertaLayer, ViTLayer, DistilBERT's TransformerBlock and
    # BartEncoderLayer return (hidden_states,) or hidden_states; BartDecoderLayer adds its cache
    # only with use_cache, which BartForConditionalGeneration.forward turns off given labels
    **{key: 1 for key in SKIPPED_INDEX if key[0] not in ("gpt2", "t5", "mt5")},
    # GPT2Block: (hidden_states, present) with present = (key, value), each [batch, heads, seq,
    # head_dim], as GPT2Config.use_cache defaults to True and neither GPT-2 class turns it off
    # (gpt2/modeling_gpt2.py: PipelinedGPT2LMHeadModel, GPT2PipelineMixin; OptimizedGPT2Attention
    # replaces _attn only): 3 per block, 36 for GPT-2's 12
    ("gpt2", "causal-lm"): 3,
    ("gpt2", "sequence-classification"): 3,
    # t5/modeling_t5.py, CustomT5Block (mt5: CustomMT5Block) also return position biases
    # ([batch, heads, seq, seq]) and, in the decoder, the key/value cache: not hidden-sized, and
    # not counted here (the estimate keeps the hidden state only)
    ("t5", "seq2seq-lm"): 1,
    ("mt5", "seq2seq-lm"): 1,
}


#: Units each pipelined class's parallelize() puts on IPU 0 beyond the embeddings (the first unit):
#: module paths a unit must begin with (the module itself or one inside it). Every other unit runs
#: on its layer's IPU, a head after the last layer on the last IPU, whether or not it reads the
#: embedding's weight (the PopTorch target's rule, trace._place_heads_with_their_weights). None:
#: the class pins the tied head only (the traced ties stand). optimum/graphcore/models/:
ON_IPU0: dict[tuple[str, str], tuple[str, ...] | None] = {
    # bert/modeling_bert.py: PipelinedBertForMaskedLM.parallelize, BeginBlock(self.cls,
    # "Classifier", ipu_id=0); BertPipelineMixin.parallelize (classification, QA) puts the heads
    # on the last IPU
    ("bert", "sequence-classification"): (),
    ("bert", "question-answering"): (),
    ("bert", "masked-lm"): ("cls",),
    # roberta/modeling_roberta.py: PipelinedRobertaForMaskedLM.parallelize,
    # BeginBlock(self.lm_head, "LM Head", ipu_id=0); RobertaPipelineMixin's heads on the last IPU
    ("roberta", "sequence-classification"): (),
    ("roberta", "question-answering"): (),
    ("roberta", "masked-lm"): ("lm_head",),
    # distilbert/modeling_distilbert.py: PipelinedDistilBertForMaskedLM.parallelize,
    # BeginBlock(..., "LM Head", ipu_id=0) on vocab_transform, vocab_layer_norm and
    # vocab_projector, all three
    ("distilbert", "sequence-classification"): (),
    ("distilbert", "question-answering"): (),
    ("distilbert", "masked-lm"): ("vocab_transform", "vocab_layer_norm", "vocab_projector"),
    # deberta/modeling_deberta.py: DebertaPipelineMixin.parallelize, for
    # PipelinedDebertaForMaskedLM only BeginBlock(self.cls.predictions.decoder, "Projection",
    # ipu_id=0): the transform before it stays on the last layer's IPU
    ("deberta", "sequence-classification"): (),
    ("deberta", "question-answering"): (),
    ("deberta", "masked-lm"): ("cls.predictions.decoder",),
    # gpt2/modeling_gpt2.py: PipelinedGPT2LMHeadModel.parallelize,
    # BeginBlock(self.lm_head, "LM head", ipu_id=0) (ln_f stays with the last layer);
    # PipelinedGPT2ForSequenceClassification: score last
    ("gpt2", "causal-lm"): ("lm_head",),
    ("gpt2", "sequence-classification"): (),
    # bart/modeling_bart.py: PipelinedBartForConditionalGeneration.parallelize (training):
    # BeginBlock(self.model.decoder.embed_positions / layernorm_embedding, "Embedding", ipu_id=0)
    # between the encoder's and the decoder's loops, and BeginBlock(self.lm_head, ..., ipu_id=0)
    ("bart", "seq2seq-lm"): (
        "model.decoder.embed_positions",
        "model.decoder.layernorm_embedding",
        "lm_head",
    ),
    # t5/modeling_t5.py: PipelinedT5ForConditionalGeneration.parallelize, BeginBlock(self.lm_head,
    # "LM Head Output", ipu_id=0), tied or not; each final_layer_norm on its stack's last IPU
    ("t5", "seq2seq-lm"): ("lm_head",),
    # mt5/modeling_mt5.py: PipelinedMT5ForConditionalGeneration.parallelize, lm_head on IPU 0 only
    # `if self.config.tie_word_embeddings`, else on the last IPU: the traced tie decides
    ("mt5", "seq2seq-lm"): None,
    # vit/modeling_vit.py: PipelinedViTForImageClassification.parallelize, classifier on the
    # last IPU
    ("vit", "image-classification"): (),
}


def _pinned(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def optimum_placed(profile: ModelProfile) -> ModelProfile:
    """The profile with the units optimum's parallelize() puts on IPU 0 (`ON_IPU0`) placed with
    the first unit, and no other unit moved (the traced ties stand for a class the table leaves
    to them, None, or a model optimum does not pipeline: optimum_target.model_refusal); its
    layers keeping, when checkpointed, every tensor they return (`CHECKPOINTED_OUTPUTS`)."""
    key = (_family(profile.model), profile.task)
    prefixes, outputs = ON_IPU0.get(key), CHECKPOINTED_OUTPUTS.get(key, 1)
    units = profile.units
    if prefixes is not None:
        units = [
            dataclasses.replace(u, placed_with=0 if i > 0 and _pinned(u.path, prefixes) else None)
            for i, u in enumerate(units)
        ]
    layers = (
        set(_layer_units(profile.model, profile.task, tuple(u.path for u in units)))
        if outputs > 1
        else ()
    )
    units = [
        dataclasses.replace(u, checkpointed_outputs=outputs) if i in layers else u
        for i, u in enumerate(units)
    ]
    return dataclasses.replace(profile, units=units)
