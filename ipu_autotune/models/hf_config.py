"""Where an `hf:` model's architecture comes from, and what it implies, read from its config.

`hf:NAME` is a tabulated checkpoint (models/hf.py, the offline shortcut), `hf:PATH`, a
folder holding the checkpoint's `config.json` (one file of a Hub download), or a name whose
`config.json` is already in the local Hugging Face cache (models/hub_cache.py). Either way
the result is a `transformers` config, never weights and never the network. What the rest of
the tool needs to know of the model (its family, the tasks it has heads for, its longest
sequence, whether it reads images) is derived from that config and transformers' own Auto
mappings, not tabulated per model name.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .hub_cache import cache_dir, cached_snapshot

if TYPE_CHECKING:
    from transformers import PretrainedConfig

PREFIX = "hf:"
DEFAULT_SEQ_LEN = 128  # hf: text models, when --seq-len is not given
# seq2seq models' decoder tokens unless told, at most the encoder's: optimum-graphcore's
# summarization example trains at max_target_length 128 with max_source_length 1024
# (examples/summarization/run_summarization.py, DataTrainingArguments)
DEFAULT_DECODER_SEQ_LEN = 128

# task name -> transformers Auto class; the labels each task's loss needs are in inputs.hf_labels.
TASKS = {
    "sequence-classification": "AutoModelForSequenceClassification",
    "masked-lm": "AutoModelForMaskedLM",
    "causal-lm": "AutoModelForCausalLM",
    "question-answering": "AutoModelForQuestionAnswering",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
}
# task -> the Auto class's model_type -> class table (transformers.models.auto.modeling_auto,
# the same names in 4.x and 5.x)
_MAPPINGS = {
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
}


def download_hint(key: str) -> str:
    """The fix for a model we have no config for: one file of its Hub download, as a folder."""
    local = Path(key).name or "DIR"
    return (
        f"download its config.json (huggingface-cli download {key} config.json --local-dir "
        f"{local}) and pass the folder: hf:{local}"
    )


@dataclass(frozen=True)
class Architecture:
    family: str  # transformers model_type
    default_task: str
    tasks: tuple[str, ...]  # the tasks transformers has a head for, that the tool trains
    max_positions: int  # longest sequence the position embeddings allow (0: relative, no limit)
    image_shape: tuple[int, ...] = ()  # (channels, height, width) for an image model; () for text

    @property
    def reads_images(self) -> bool:
        return bool(self.image_shape)


@dataclass(frozen=True)
class Tabulated:
    """A checkpoint's published config.json sizes (hidden size, layers, heads, feed-forward
    size, vocabulary, positions), to build it offline by name."""

    family: str  # transformers model_type
    sizes: dict[str, Any]  # keyword arguments of the family's Config class
    default_task: str


def _bert(layers: int, hidden: int, heads: int) -> dict[str, Any]:
    return dict(
        vocab_size=30522,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
        type_vocab_size=2,
    )


def _gpt2(layers: int, hidden: int, heads: int) -> dict[str, Any]:
    return dict(vocab_size=50257, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=1024)


ARCHITECTURES: dict[str, Tabulated] = {
    "bert-base-uncased": Tabulated("bert", _bert(12, 768, 12), "sequence-classification"),
    "bert-large-uncased": Tabulated("bert", _bert(24, 1024, 16), "sequence-classification"),
    "roberta-base": Tabulated(
        "roberta",
        dict(
            _bert(12, 768, 12),
            vocab_size=50265,
            max_position_embeddings=514,
            type_vocab_size=1,
            pad_token_id=1,
        ),
        "sequence-classification",
    ),
    "distilbert-base-uncased": Tabulated(
        "distilbert",
        dict(
            vocab_size=30522,
            dim=768,
            n_layers=6,
            n_heads=12,
            hidden_dim=3072,
            max_position_embeddings=512,
        ),
        "sequence-classification",
    ),
    "gpt2": Tabulated("gpt2", _gpt2(12, 768, 12), "causal-lm"),
    "gpt2-medium": Tabulated("gpt2", _gpt2(24, 1024, 16), "causal-lm"),
    "gpt2-large": Tabulated("gpt2", _gpt2(36, 1280, 20), "causal-lm"),
    "t5-small": Tabulated(
        "t5",
        dict(
            vocab_size=32128,
            d_model=512,
            d_kv=64,
            d_ff=2048,
            num_layers=6,
            num_decoder_layers=6,
            num_heads=8,
            decoder_start_token_id=0,
            pad_token_id=0,
        ),
        "seq2seq-lm",
    ),
    "mt5-small": Tabulated(
        "mt5",
        dict(
            vocab_size=250112,
            d_model=512,
            d_kv=64,
            d_ff=1024,
            num_layers=8,
            num_decoder_layers=8,
            num_heads=6,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
            decoder_start_token_id=0,
            pad_token_id=0,
        ),
        "seq2seq-lm",
    ),
}


def is_hf(name: str) -> bool:
    return name.startswith(PREFIX)


def folder(name: str) -> Path | None:
    """The folder `hf:PATH` names, when it holds a config.json."""
    path = Path(name[len(PREFIX) :] if is_hf(name) else name).expanduser()
    return path if (path / "config.json").is_file() else None


@lru_cache(maxsize=32)
def _loaded(name: str) -> PretrainedConfig:
    """The model's transformers config (shared: callers take a copy via `model_config`)."""
    import transformers

    # its notes about unused config keys are not the user's
    transformers.logging.set_verbosity_error()
    key = name[len(PREFIX) :] if is_hf(name) else name
    where = folder(name)
    if where is None and key not in ARCHITECTURES:
        where = cached_snapshot(key)  # downloaded before: the local Hub cache, no network
    if where is not None:
        _check_config_file(name, where / "config.json")
        try:
            loaded: PretrainedConfig = transformers.AutoConfig.from_pretrained(
                str(where), local_files_only=True
            )
            return loaded
        except (OSError, ValueError, KeyError, TypeError) as exc:
            reason = " ".join(str(exc).split())[:160]
            raise UsageError(
                f"model '{name}': transformers cannot build a config from {where / 'config.json'} "
                f"({reason}); fix the file or download it again"
            ) from None
    if key in ARCHITECTURES:
        family, sizes = ARCHITECTURES[key].family, ARCHITECTURES[key].sizes
        config = transformers.AutoConfig.for_model(family, **sizes)
        for k, value in sizes.items():  # for_model drops some keys (tie_word_embeddings in v5)
            setattr(config, k, value)
        return config
    if Path(key).expanduser().is_dir():
        raise UsageError(
            f"model '{name}': the folder has no config.json; download the model's config.json "
            "into it (huggingface-cli download NAME config.json --local-dir FOLDER)"
        )
    close = difflib.get_close_matches(key, ARCHITECTURES, n=3, cutoff=0.6)
    known = f"did you mean {', '.join(PREFIX + c for c in close)}? Or " if close else ""
    raise UsageError(
        f"unknown Hugging Face model '{name}' (not tabulated, not a folder with a config.json, "
        f"not in the Hugging Face cache {cache_dir()}); {known}{download_hint(key)}"
    )


def _check_config_file(name: str, path: Path) -> None:
    """A config.json transformers can read: JSON, with a model_type it knows (its own errors
    run to paragraphs)."""
    import json

    from transformers import CONFIG_MAPPING, __version__

    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(
            f"model '{name}': {path} is not readable JSON ({exc}); download it again"
        ) from None
    family = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(family, str):
        raise UsageError(
            f"model '{name}': {path} has no model_type; it must be a transformers model's "
            "config.json"
        )
    if family not in CONFIG_MAPPING:
        raise UsageError(
            f"model '{name}': model_type '{family}' in {path} is not one transformers "
            f"{__version__} knows; upgrade transformers or use a model it has"
        )


def model_config(name: str) -> PretrainedConfig:
    """A fresh copy of the model's config, for the caller to adjust."""
    return copy.deepcopy(_loaded(name))


def task_class(family: str, task: str) -> str:
    """The transformers class `TASKS[task]` builds for a model_type ('' when it has none)."""
    from transformers.models.auto import modeling_auto

    name = getattr(modeling_auto, _MAPPINGS[task], {}).get(family, "")
    return name if isinstance(name, str) else name[0]


def _heads(family: str) -> tuple[str, ...]:
    from transformers.models.auto import modeling_auto

    return tuple(
        task for task, table in _MAPPINGS.items() if family in getattr(modeling_auto, table, {})
    )


def _image_shape(config: PretrainedConfig) -> tuple[int, ...]:
    size = config.image_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return (getattr(config, "num_channels", 3), height, width)


def _max_positions(config: PretrainedConfig) -> int:
    limit = next(
        (
            getattr(config, k)
            for k in ("max_position_embeddings", "n_positions")
            if isinstance(getattr(config, k, None), int)
        ),
        0,
    )
    if "roberta" in config.model_type and limit:
        # RoBERTa's positions start after the padding index (RobertaEmbeddings, padding_idx + 1)
        limit -= (config.pad_token_id or 0) + 1
    return limit


@lru_cache(maxsize=32)
def derived(name: str) -> Architecture:
    """The architecture's facts from its config: the family, the heads, the positions."""
    config = _loaded(name)
    family = config.model_type
    heads = _heads(family)
    text_heads = tuple(t for t in heads if t != "image-classification")
    if config.is_encoder_decoder:
        # Our inputs give the decoder its labels only for seq2seq-lm (the model shifts them into
        # decoder_input_ids); other heads of encoder-decoders need decoder inputs we do not build.
        tasks = tuple(t for t in text_heads if t == "seq2seq-lm")
    elif text_heads:
        tasks = text_heads
    else:
        tasks = tuple(t for t in heads if t == "image-classification")
    if not tasks:
        raise UsageError(
            f"model '{name}' (model_type {family}): transformers has none of the heads "
            f"ipu-autotune trains ({', '.join(TASKS)}) for it; use a text or "
            "image-classification model"
        )
    key = name[len(PREFIX) :]
    if key in ARCHITECTURES and folder(name) is None:
        default = ARCHITECTURES[key].default_task
    elif "seq2seq-lm" in tasks:
        default = "seq2seq-lm"
    elif tasks == ("image-classification",):
        default = "image-classification"
    elif "causal-lm" in tasks and "masked-lm" not in tasks:
        default = "causal-lm"  # a decoder-only model (GPT-2, LLaMA, GPT-NeoX)
    else:
        default = tasks[0] if "sequence-classification" not in tasks else "sequence-classification"
    image_shape = _image_shape(config) if tasks == ("image-classification",) else ()
    return Architecture(family, default, tasks, _max_positions(config), image_shape)
