"""Hugging Face transformers as `hf:NAME` or `hf:PATH`, built from their configuration, never
downloaded.

`hf:PATH` is a folder with the checkpoint's `config.json`; the names tabulated in
models/hf_config.py are the offline shortcut. Either way `transformers` builds the module
tree the Hub checkpoint would load into, on the `meta` device, with no network access.
Tasks choose the head the way `AutoModelFor<Task>` does; the repeated layers are found in
the built model (`layer_stacks`).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

from ..errors import UsageError

# hf_config's tables and names, found here with the models they describe (re-exported: `X as X`)
from .hf_config import (
    ARCHITECTURES as ARCHITECTURES,
    DEFAULT_DECODER_SEQ_LEN,
    DEFAULT_SEQ_LEN,
    PREFIX as PREFIX,
    TASKS as TASKS,
    Architecture,
    derived,
    is_hf as is_hf,
    model_config as model_config,
)


def architecture(name: str) -> Architecture:
    return derived(name)


def resolve_task(name: str, task: str) -> str:
    arch = architecture(name)
    task = task or arch.default_task
    if task not in TASKS:
        raise UsageError(f"unknown task '{task}'; use one of {', '.join(TASKS)}")
    if task not in arch.tasks:
        raise UsageError(f"{name} has no {task} head; use --task {' or '.join(arch.tasks)}")
    return task


def check_seq_len(name: str, seq_len: int, flag: str = "--seq-len") -> None:
    limit = architecture(name).max_positions
    if limit and seq_len > limit:
        raise UsageError(
            f"{name}: {flag} {seq_len} exceeds its {limit} position embeddings; use {limit} or "
            "less"
        )


def problem_shape(
    name: str, task: str, seq_len: int, decoder_seq_len: int, input_shape: tuple[int, ...]
) -> tuple[int, int, tuple[int, ...]]:
    """(seq_len, decoder_seq_len, input_shape) of an hf: problem, defaults filled in, checked.
    Token models: --input-shape N is the sequence length (with --seq-len, they must agree);
    image models take the size their config was built for."""
    arch = architecture(name)
    input_shape = tuple(input_shape)
    if arch.reads_images:
        if seq_len or decoder_seq_len:
            raise UsageError(
                f"{name} reads images, not tokens: drop --seq-len and --decoder-seq-len"
            )
        if input_shape and input_shape != arch.image_shape:
            size = "x".join(map(str, arch.image_shape))
            raise UsageError(
                f"{name} takes {size} images (image_size and num_channels in its config.json); "
                f"drop --input-shape/--image-size or change them in config.json"
            )
        return 0, 0, arch.image_shape
    if input_shape:
        if len(input_shape) != 1:
            raise UsageError(
                f"{name} takes token ids, not {'x'.join(map(str, input_shape))} inputs: "
                "give --seq-len N instead of --input-shape/--image-size"
            )
        if seq_len and seq_len != input_shape[0]:
            raise UsageError(
                f"{name}: --input-shape {input_shape[0]} and --seq-len {seq_len} disagree; "
                "give --seq-len only"
            )
        seq_len = input_shape[0]
    seq_len = seq_len or DEFAULT_SEQ_LEN
    check_seq_len(name, seq_len)
    if task == "seq2seq-lm":
        decoder_seq_len = decoder_seq_len or min(seq_len, DEFAULT_DECODER_SEQ_LEN)
        check_seq_len(name, decoder_seq_len, "--decoder-seq-len")
    elif decoder_seq_len:
        raise UsageError(f"{name}: --decoder-seq-len is for --task seq2seq-lm; drop it for {task}")
    return seq_len, decoder_seq_len, (seq_len,)


def check_max_predictions(name: str, task: str, seq_len: int, max_predictions: int) -> None:
    from .masked_tokens import HEADS

    if not max_predictions:
        return
    family = architecture(name).family
    if task != "masked-lm" or family not in HEADS:
        raise UsageError(
            f"{name}: --max-predictions gathers masked tokens for --task masked-lm on "
            f"{', '.join(HEADS)} models; drop it for {task}"
        )
    if max_predictions > seq_len:
        raise UsageError(
            f"{name}: --max-predictions {max_predictions} exceeds --seq-len {seq_len}; "
            "use at most one per token"
        )


#: the loss of sequence-classification heads: what transformers picks for integer labels
#: anyway, said outright because DeBERTa's unset default first selects the labelled rows with
#: `nonzero()`, a data-dependent shape that neither the meta trace nor PopTorch can follow
SEQUENCE_CLASSIFICATION_LOSS: Final = "single_label_classification"


def model_settings(problem: ProblemInputs) -> list[str]:
    """Lines of the exported snippet that set on the user's model what the estimate trained."""
    if problem.token_inputs and problem.task == "sequence-classification":
        return [
            f"model.config.problem_type = {SEQUENCE_CLASSIFICATION_LOSS!r}  # the loss PopTorch "
            "can trace"
        ]
    return []


if TYPE_CHECKING:
    import torch

    from .inputs import ProblemInputs


#: the config keys families name their dropout on the attention probabilities with
#: (BERT, RoBERTa, DeBERTa, ViT; DistilBERT, BART, LLaMA, GPT-NeoX; GPT-2); T5 has none
ATTENTION_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout", "attn_pdrop")


def attention_dropout_key(name: str) -> str | None:
    config = model_config(name)
    return next(
        (k for k in ATTENTION_DROPOUT_KEYS if isinstance(getattr(config, k, None), (int, float))),
        None,
    )


def check_attention_dropout(name: str, attention_dropout: float | None) -> None:
    if attention_dropout is not None and not attention_dropout_key(name):
        raise UsageError(
            f"{name}: {architecture(name).family} has no separate attention dropout; "
            "drop --attention-dropout"
        )


def build_hf_model(
    name: str,
    task: str,
    num_labels: int,
    device: str | torch.device = "meta",
    max_predictions: int = 0,
    attention_dropout: float | None = None,
) -> Any:
    """The model with the task's head, randomly initialised on `device`, in training mode.
    `max_predictions`: the masked-LM head runs on gathered positions (models/masked_tokens.py);
    `attention_dropout`: the dropout on attention probabilities, when not the checkpoint's."""
    import torch
    import transformers

    task = resolve_task(name, task)
    config = model_config(name)
    if task in ("sequence-classification", "image-classification"):
        config.num_labels = num_labels
    if task == "sequence-classification":
        config.problem_type = SEQUENCE_CLASSIFICATION_LOSS
    if (
        attention_dropout is not None
    ):  # Graphcore pretrains BERT without it (configs_pretraining.yml)
        key = attention_dropout_key(name)
        if key is None:  # Problem refuses it before (check_attention_dropout)
            raise UsageError(
                f"{name}: {architecture(name).family} has no separate attention dropout"
            )
        setattr(config, key, attention_dropout)
    # Eager attention: the exact ops PopTorch traces, and no data-dependent mask shortcuts.
    config._attn_implementation = "eager"
    with torch.device(device):
        model = getattr(transformers, TASKS[task]).from_config(config, attn_implementation="eager")
    if config.is_encoder_decoder:
        # T5's and BART's encoder and decoder always share one embedding (`shared`), tied head
        # or not.
        model.set_input_embeddings(model.get_input_embeddings())
    if max_predictions:
        from .masked_tokens import gather_before_head

        model = gather_before_head(model)
    return model.train()


def _identical_stacks(model: Any) -> list[tuple[str, int]]:
    """(path, blocks) of each outermost ModuleList of two or more weighted blocks of one class."""
    from torch import nn

    found: list[tuple[str, int]] = []
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or any(
            path.startswith(p + ".") for p, _ in found
        ):
            continue
        blocks = list(module)
        if (
            len(blocks) >= 2
            and len({type(b) for b in blocks}) == 1
            and any(True for _ in blocks[0].parameters())
        ):
            found.append((path, len(blocks)))
    return found


@lru_cache(maxsize=16)
def layer_stacks(name: str, task: str) -> tuple[str, ...]:
    """Module paths of the repeated layers (IPUConfig's layers_per_ipu counts them): the longest
    list of identical blocks, or for an encoder-decoder the encoder's and the decoder's."""
    model = build_hf_model(name, task, 2)
    stacks = _identical_stacks(model)
    if not model.config.is_encoder_decoder:
        return (max(stacks, key=lambda s: s[1])[0],) if stacks else ()
    paths = {m: p for p, m in model.named_modules()}
    picked = []
    for part in (model.get_encoder(), model.get_decoder()):
        inside = [s for s in stacks if s[0].startswith(paths[part] + ".")]
        if inside:
            picked.append(max(inside, key=lambda s: s[1])[0])
    return tuple(picked)


def layer_count(name: str, task: str = "") -> int:
    """The repeated layers' blocks, encoder and decoder together."""
    task = resolve_task(name, task)
    modules = dict(build_hf_model(name, task, 2).named_modules())
    return sum(len(modules[p]) for p in layer_stacks(name, task))


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


class jit_like_tracing:
    """Inside, `transformers` believes it is being traced, as it is under PopTorch's
    torch.jit trace: it keeps the attention mask instead of checking its values
    (`masking_utils._ignore_bidirectional_mask_sdpa` reads `mask.all()`, which meta tensors
    cannot answer)."""

    def __enter__(self) -> jit_like_tracing:
        self._module: Any = None
        if "transformers" not in sys.modules:  # no model of it can be traced: no import (0.7 s)
            return self
        try:
            from transformers import masking_utils
        except ImportError:
            return self
        module: Any = masking_utils  # is_tracing is imported into it, not its own: patched by name
        self._module, self._saved = module, module.is_tracing
        module.is_tracing = lambda tensor=None: True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._module is not None:
            self._module.is_tracing = self._saved
