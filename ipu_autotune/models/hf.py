"""Hugging Face transformers as `hf:NAME`, built from their configuration, never downloaded.

The architecture sizes below are the published ones of each checkpoint's `config.json`
(hidden size, layers, heads, feed-forward size, vocabulary, positions); with them
`transformers` builds the same module tree the Hub checkpoint would load into, with no
network access. Tasks choose the head the way `AutoModelFor<Task>` does.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache

from ..errors import UsageError

PREFIX = "hf:"

# task name -> transformers Auto class; the labels each task's loss needs are in `task_labels`.
TASKS = {
    "sequence-classification": "AutoModelForSequenceClassification",
    "masked-lm": "AutoModelForMaskedLM",
    "causal-lm": "AutoModelForCausalLM",
    "question-answering": "AutoModelForQuestionAnswering",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
}


@dataclass(frozen=True)
class Architecture:
    family: str  # transformers model_type
    sizes: dict  # keyword arguments of the family's Config class
    default_task: str
    max_positions: int  # longest sequence the position embeddings allow (0: relative, no limit)
    layers_path: str  # where the repeated blocks live, for IPUConfig.layers_per_ipu


def _bert(layers: int, hidden: int, heads: int) -> dict:
    return dict(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=4 * hidden, max_position_embeddings=512, type_vocab_size=2)


def _gpt2(layers: int, hidden: int, heads: int) -> dict:
    return dict(vocab_size=50257, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=1024)


ARCHITECTURES: dict[str, Architecture] = {
    "bert-base-uncased": Architecture("bert", _bert(12, 768, 12), "sequence-classification", 512,
                                      "encoder.layer"),
    "bert-large-uncased": Architecture("bert", _bert(24, 1024, 16), "sequence-classification", 512,
                                       "encoder.layer"),
    "roberta-base": Architecture("roberta", dict(_bert(12, 768, 12), vocab_size=50265, max_position_embeddings=514,
                                                 type_vocab_size=1, pad_token_id=1),
                                 "sequence-classification", 512, "encoder.layer"),
    "distilbert-base-uncased": Architecture("distilbert", dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12,
                                                               hidden_dim=3072, max_position_embeddings=512),
                                            "sequence-classification", 512, "transformer.layer"),
    "gpt2": Architecture("gpt2", _gpt2(12, 768, 12), "causal-lm", 1024, "h"),
    "gpt2-medium": Architecture("gpt2", _gpt2(24, 1024, 16), "causal-lm", 1024, "h"),
    "gpt2-large": Architecture("gpt2", _gpt2(36, 1280, 20), "causal-lm", 1024, "h"),
    "t5-small": Architecture("t5", dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6,
                                        num_decoder_layers=6, num_heads=8, decoder_start_token_id=0,
                                        pad_token_id=0), "seq2seq-lm", 0, "block"),
    "mt5-small": Architecture("mt5", dict(vocab_size=250112, d_model=512, d_kv=64, d_ff=1024, num_layers=8,
                                          num_decoder_layers=8, num_heads=6, feed_forward_proj="gated-gelu",
                                          tie_word_embeddings=False, decoder_start_token_id=0, pad_token_id=0),
                          "seq2seq-lm", 0, "block"),
}

# Which tasks each family has a head for in transformers.
_FAMILY_TASKS = {
    "bert": ("sequence-classification", "masked-lm", "question-answering", "causal-lm"),
    "roberta": ("sequence-classification", "masked-lm", "question-answering", "causal-lm"),
    "distilbert": ("sequence-classification", "masked-lm", "question-answering"),
    "gpt2": ("causal-lm", "sequence-classification", "question-answering"),
    "t5": ("seq2seq-lm",),
    "mt5": ("seq2seq-lm",),
}



def is_hf(name: str) -> bool:
    return name.startswith(PREFIX)


def architecture(name: str) -> Architecture:
    key = name[len(PREFIX):] if is_hf(name) else name
    if key not in ARCHITECTURES:
        close = difflib.get_close_matches(key, ARCHITECTURES, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(PREFIX + c for c in close)}?" if close else \
            "known: " + ", ".join(PREFIX + k for k in ARCHITECTURES)
        raise UsageError(f"unknown Hugging Face model '{name}' (built offline from tabulated sizes); {hint}")
    return ARCHITECTURES[key]


def resolve_task(name: str, task: str) -> str:
    arch = architecture(name)
    task = task or arch.default_task
    if task not in TASKS:
        raise UsageError(f"unknown task '{task}'; use one of {', '.join(TASKS)}")
    if task not in _FAMILY_TASKS[arch.family]:
        raise UsageError(f"{name} has no {task} head; use --task {' or '.join(_FAMILY_TASKS[arch.family])}")
    return task


def check_seq_len(name: str, seq_len: int) -> None:
    limit = architecture(name).max_positions
    if limit and seq_len > limit:
        raise UsageError(f"{name}: --seq-len {seq_len} exceeds its {limit} position embeddings; use {limit} or less")


def check_max_predictions(name: str, task: str, seq_len: int, max_predictions: int) -> None:
    from .masked_tokens import HEADS

    if not max_predictions:
        return
    family = architecture(name).family
    if task != "masked-lm" or family not in HEADS:
        raise UsageError(f"{name}: --max-predictions gathers masked tokens for --task masked-lm on "
                         f"{', '.join(HEADS)} models; drop it for {task}")
    if max_predictions > seq_len:
        raise UsageError(f"{name}: --max-predictions {max_predictions} exceeds --seq-len {seq_len}; "
                         "use at most one per token")


#: the config key of each family's dropout on the attention probabilities
ATTENTION_DROPOUT_KEYS = {"bert": "attention_probs_dropout_prob", "roberta": "attention_probs_dropout_prob",
                          "distilbert": "attention_dropout", "gpt2": "attn_pdrop"}


def check_attention_dropout(name: str, attention_dropout: float | None) -> None:
    family = architecture(name).family
    if attention_dropout is not None and family not in ATTENTION_DROPOUT_KEYS:
        raise UsageError(f"{name}: {family} has no separate attention dropout; drop --attention-dropout")


def attention_dropout_key(name: str) -> str:
    return ATTENTION_DROPOUT_KEYS[architecture(name).family]


def build_hf_model(name: str, task: str, num_labels: int, device="meta", max_predictions: int = 0,
                   attention_dropout: float | None = None):
    """The model with the task's head, randomly initialised on `device`, in training mode.
    `max_predictions`: the masked-LM head runs on gathered positions (models/masked_tokens.py);
    `attention_dropout`: the dropout on attention probabilities, when not the checkpoint's."""
    import torch
    import transformers

    arch = architecture(name)
    task = resolve_task(name, task)
    transformers.logging.set_verbosity_error()  # its notes about unused config keys are not the user's
    config = transformers.AutoConfig.for_model(arch.family, **arch.sizes)
    for key, value in arch.sizes.items():  # for_model drops some keys (tie_word_embeddings in v5)
        setattr(config, key, value)
    if task == "sequence-classification":
        config.num_labels = num_labels
    if attention_dropout is not None:  # Graphcore pretrains BERT without it (configs_pretraining.yml)
        setattr(config, attention_dropout_key(name), attention_dropout)
    # Eager attention: the exact ops PopTorch traces, and no data-dependent mask shortcuts.
    config._attn_implementation = "eager"
    with torch.device(device):
        model = getattr(transformers, TASKS[task]).from_config(config, attn_implementation="eager")
    if arch.family in ("t5", "mt5"):
        # T5's encoder and decoder always share one embedding (`shared`), tied head or not.
        model.set_input_embeddings(model.get_input_embeddings())
    if max_predictions:
        from .masked_tokens import gather_before_head

        model = gather_before_head(model)
    return model.train()


#: tasks whose head projects onto the vocabulary (the output embedding)
VOCABULARY_TASKS = ("masked-lm", "causal-lm", "seq2seq-lm")
#: embedding_serialization values the transformer space offers (optimum-graphcore's
#: embedding_serialization_factor); a vocabulary that a factor does not divide is padded
#: (padded_vocabulary), as optimum-graphcore pads GPT-2's
SERIALIZATION_FACTORS = (1, 2, 4, 8)


@lru_cache(maxsize=16)
def vocabulary_projection(name: str, task: str) -> tuple[str, int] | None:
    """(module path, vocabulary size) of the task head's projection onto the vocabulary,
    which `embedding_serialization` splits; None when the head has none."""
    task = resolve_task(name, task)
    if task not in VOCABULARY_TASKS:
        return None
    model = build_hf_model(name, task, 2)
    head = model.get_output_embeddings()
    path = next(p for p, m in model.named_modules() if m is head)
    return path, head.weight.shape[0]


def serialization_factors(name: str, task: str) -> tuple[int, ...]:
    """The factors the vocabulary projection can be split into (1 alone: it has none)."""
    found = vocabulary_projection(name, task) if is_hf(name) else None
    return SERIALIZATION_FACTORS if found else (1,)


def padded_vocabulary(words: int, factor: int) -> int:
    """The vocabulary rounded up to a multiple of the factor: PopART splits only output
    channels the factor divides (willow/src/op/matmul.cpp, MatMulOp::setup), so
    optimum-graphcore resizes the token embeddings to this and masks the padding logits
    (optimum/graphcore/models/gpt2/modeling_gpt2.py, PipelinedGPT2LMHeadModel.parallelize
    and forward)."""
    return -(-words // factor) * factor


def layer_count(name: str) -> int:
    sizes = architecture(name).sizes
    for key in ("num_hidden_layers", "n_layer", "n_layers"):
        if key in sizes:
            return sizes[key]
    return sizes["num_layers"] + sizes.get("num_decoder_layers", sizes["num_layers"])


class jit_like_tracing:
    """Inside, `transformers` believes it is being traced, as it is under PopTorch's
    torch.jit trace: it keeps the attention mask instead of checking its values
    (`masking_utils._ignore_bidirectional_mask_sdpa` reads `mask.all()`, which meta tensors
    cannot answer)."""

    def __enter__(self):
        try:
            from transformers import masking_utils
        except ImportError:
            self._module = None
            return self
        self._module, self._saved = masking_utils, masking_utils.is_tracing
        masking_utils.is_tracing = lambda tensor=None: True
        return self

    def __exit__(self, *exc):
        if self._module is not None:
            self._module.is_tracing = self._saved
        return False
