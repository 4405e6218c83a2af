"""Problem (what is trained, fixed for a study) and Config (one IPU configuration).

Both are frozen dataclasses of plain values, with a dict form that is the public TOML/JSON
contract (README, config files). Parsing checks types and names here; the cross-field rules
live in `rules/cross_field.py`; reading and checking the files' values is `parsing.py`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import UsageError
from .knob_spec import SPEC
from .models.hf_config import DEFAULT_DECODER_SEQ_LEN, DEFAULT_SEQ_LEN
from .models.shapes import parse_shape
from .parsing import parse_fields, read_toml

#: the workshop's data: the CIFAR-10 training set
DEFAULT_DATASET_SIZE = 50_000
#: host memory one call's samples (times the loader's buffering) may take, GB
DEFAULT_HOST_MEMORY_GB = 32.0
#: samples per weight update beyond which the tuner does not go unless told
#: (README, "Training recipe")
DEFAULT_MAX_GLOBAL_BATCH = 2048
#: the ceiling when fine-tuning a transformer (a task head on a pretrained body): the global
#: batch of Graphcore's SQuAD BERT-Large, micro-batch 4 x accumulation 32 x 2 replicas
#: (graphcore/examples nlp/bert/pytorch/configs_squad.yml, squad_large_384)
FINE_TUNING_MAX_GLOBAL_BATCH = 256
FINE_TUNING_TASKS = ("sequence-classification", "question-answering")
DEFAULT_AMP = 0.6  # poplibs' default availableMemoryProportion

# Models whose input size is fixed by their architecture (position embeddings).
_FIXED_224 = ("vit_", "swin_", "maxvit")


def default_input_shape(model: str, seq_len: int = 0) -> tuple[int, ...]:
    """Image size when none is given; for `hf:` models, one sequence of token ids.

    64x64 is the Graphcore hands-on workshop's size, which is the problem this tool's
    default run reproduces; transformers with learned position embeddings need 224.
    """
    if model.startswith("hf:"):
        from .models.hf import architecture

        return architecture(model).image_shape or (seq_len or DEFAULT_SEQ_LEN,)
    if model.startswith(_FIXED_224):
        return (3, 224, 224)
    return (3, 64, 64)


#: Problem fields the slug always names in its own way (model-bs64-2ipu-mk2-3x32x32-gb512)
_SLUG_FIXED = (
    "model",
    "batch_size",
    "ipus",
    "target",
    "input_shape",
    "global_batch",
    "task",
    "seq_len",
    "inputs",
    "decoder_seq_len",
)
#: measured by --data, a little different on every run: a resumed study keeps the costs it
#: was created with, so they must not change its name
_SLUG_SKIP = ("host_float_sample_s", "host_uint8_sample_s", "host_worker_speedups")


def _slug_part(name: str, value: Any) -> str:
    """'lamb' for a word value; 'num_classes10' for a number; a short hash for anything long."""
    import hashlib
    import json
    import re

    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_.]{1,24}", value):
        return value
    if isinstance(value, (bool, int, float)):
        return f"{name}{str(value).lower()}"
    text = json.dumps(value, sort_keys=True, default=str)
    if re.fullmatch(r"[A-Za-z0-9_.]{1,24}", text):
        return f"{name}-{text}"
    return f"{name}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Problem:
    model: str
    batch_size: int
    input_shape: tuple[int, ...] = ()
    num_classes: int = 1000
    optimizer: str = "adamw"
    ipus: int = 2
    target: str = "mk2"
    global_batch: int | None = None  # micro-batch x accumulation x replicas, when fixed
    # The data side (host/pipeline.py): samples per epoch, host memory, the recipe's ceiling,
    # and the host loader's seconds per sample when measured with --data (None: the default).
    dataset_size: int = DEFAULT_DATASET_SIZE
    host_memory_gb: float = DEFAULT_HOST_MEMORY_GB
    max_global_batch: int = 0  # 0: default_max_global_batch(model, task)
    host_float_sample_s: float | None = None
    host_uint8_sample_s: float | None = None
    # loader speed-ups over one worker at 1, 2, 4, ... workers, measured by --data (empty: assumed)
    host_worker_speedups: tuple[float, ...] = ()
    # Transformers (docs/transformers.md): the task's head, the sequence length, and the
    # forward's named inputs ("NAME:SHAPE:DTYPE"); empty means one float image batch.
    task: str = ""
    seq_len: int = 0
    inputs: tuple[str, ...] = ()
    # Masked LM as Graphcore pretrains BERT: the head sees only this many gathered positions
    # per sequence (0: every position, transformers' own BertForMaskedLM).
    max_predictions: int = 0
    # Dropout on the attention probabilities of an hf: model (None: its checkpoint's own).
    attention_dropout: float | None = None
    # What trains the result (optimum_target.py): "poptorch", the exported snippet, or
    # "optimum", optimum-graphcore's IPUTrainer with the exported ipu_config.json.
    trainer: str = "poptorch"
    # Decoder tokens per sample of an hf: seq2seq model (0 elsewhere; default min(seq_len, 128)).
    decoder_seq_len: int = 0

    def __post_init__(self) -> None:
        if self.model.startswith("hf:"):
            from .models import hf

            object.__setattr__(self, "task", hf.resolve_task(self.model, self.task))
            for key, value in zip(
                ("seq_len", "decoder_seq_len", "input_shape"),
                hf.problem_shape(
                    self.model, self.task, self.seq_len, self.decoder_seq_len, self.input_shape
                ),
                strict=True,
            ):
                object.__setattr__(self, key, value)
            hf.check_max_predictions(self.model, self.task, self.seq_len, self.max_predictions)
            hf.check_attention_dropout(self.model, self.attention_dropout)
        elif self.max_predictions or self.attention_dropout is not None:
            raise UsageError(
                f"model '{self.model}': --max-predictions and --attention-dropout are for hf: "
                "models"
            )
        if not self.model.startswith("hf:") and (
            self.task or self.seq_len or self.decoder_seq_len
        ):
            raise UsageError(
                f"model '{self.model}': --task, --seq-len and --decoder-seq-len are for hf: "
                "models; describe a factory's inputs with --input NAME:SHAPE:DTYPE"
            )
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "host_worker_speedups", tuple(self.host_worker_speedups))
        if not self.input_shape and self.inputs:  # named inputs: the first one's sample shape
            object.__setattr__(self, "input_shape", parse_shape(self.inputs[0].split(":")[1]))
        if not self.input_shape:
            object.__setattr__(self, "input_shape", default_input_shape(self.model))
        object.__setattr__(self, "input_shape", tuple(self.input_shape))
        if not self.max_global_batch:
            object.__setattr__(
                self, "max_global_batch", default_max_global_batch(self.model, self.task)
            )

    @property
    def hf_options(self) -> tuple[tuple[str, int | float], ...]:
        """The hf: model builder's settings beyond name and task, as (key, value) pairs, if set."""
        return tuple(
            (k, v)
            for k, v in (
                ("max_predictions", self.max_predictions or None),
                ("attention_dropout", self.attention_dropout),
            )
            if v is not None
        )

    @property
    def token_inputs(self) -> bool:
        """Integer token ids (hf: text models), not images: no 8-bit image I/O, no image size."""
        if not self.model.startswith("hf:"):
            return False
        from .models.hf import architecture

        return not architecture(self.model).reads_images

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["input_shape"] = list(self.input_shape)
        for key in (
            "global_batch",
            "host_float_sample_s",
            "host_uint8_sample_s",
            "attention_dropout",
        ):
            if d[key] is None:
                del d[key]
        # Image problems keep the dict they always had.
        for key in (
            "task",
            "seq_len",
            "inputs",
            "max_predictions",
            "decoder_seq_len",
            "host_worker_speedups",
        ):
            if not d[key]:
                del d[key]
        if d["trainer"] == "poptorch":
            del d["trainer"]
        for key in ("inputs", "host_worker_speedups"):
            if key in d:
                d[key] = list(d[key])
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "[problem]") -> Problem:
        values = parse_fields(cls, data, where)
        for key in ("model", "batch_size"):
            if key not in values:
                raise UsageError(f"{where}: missing key '{key}'")
        return cls(**values)

    @property
    def slug(self) -> str:
        """Default study name, e.g. resnet101-bs64-2ipu-mk2."""
        name = self.model.replace(":", "-").replace(".", "-").replace("/", "-")
        if self.task:
            name = f"{name}-{self.task}" + (f"-sl{self.seq_len}" if self.seq_len else "")
        if self.decoder_seq_len and self.decoder_seq_len != min(
            self.seq_len, DEFAULT_DECODER_SEQ_LEN
        ):
            name = f"{name}-dsl{self.decoder_seq_len}"
        slug = f"{name}-bs{self.batch_size}-{self.ipus}ipu-{self.target}"
        if self.inputs:
            slug += "-" + "-".join(i.split(":")[0] for i in self.inputs)
        elif self.input_shape != default_input_shape(self.model, self.seq_len):
            slug += "-" + "x".join(str(s) for s in self.input_shape)
        if self.global_batch:
            slug += f"-gb{self.global_batch}"
        # Every other field that differs from its default, generically (fields added later
        # included), so two problems in one storage never share a default name.
        for f in fields(self):
            if f.name in _SLUG_FIXED or f.name in _SLUG_SKIP:
                continue
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                continue
            if f.name == "max_global_batch":
                default = default_max_global_batch(self.model, self.task)
            value = getattr(self, f.name)
            if value != default:
                slug += "-" + _slug_part(f.name, value)
        return slug


def default_max_global_batch(model: str, task: str) -> int:
    """The global batch ceiling unless told: 2,048 (README, "Training recipe"), 256 when
    fine-tuning a transformer's task head, where recipes use a few hundred at most."""
    if model.startswith("hf:") and task in FINE_TUNING_TASKS:
        return FINE_TUNING_MAX_GLOBAL_BATCH
    return DEFAULT_MAX_GLOBAL_BATCH


def effective_recompute(recompute: str, pipelined: bool) -> str:
    """The recomputation PopART performs. "default" is Pipeline when pipelined, else none.
    When pipelined, PopART skips its Standard/NormOnly annotators (popart willow/src/ir.cpp,
    the autoAnnotate call runs only without pipelining) and every enabled mode other than
    Pipeline takes the same path in willow/src/transforms/pipeline.cpp (setRecomputation):
    standard, norm_only and all compile alike, so they are one mode here, "all"."""
    if recompute == "default":
        return "pipeline" if pipelined else "none"
    if pipelined and recompute in ("standard", "norm_only"):
        return "all"
    return recompute


@dataclass(frozen=True)
class Config:
    precision: str = "32.32"
    partials: str = "float"
    stochastic_rounding: bool = False
    loss_scaling: float | str = 1.0
    optimizer_state: str = "float"
    ipus_per_replica: int = 1
    replicas: int = 1
    splits: tuple[str, ...] = ()
    execution: str = "pipelined"
    recompute: str = "default"
    checkpoints: tuple[str, ...] = ()
    available_memory_proportion: tuple[float, ...] = ()
    optimizer_offload: bool = False
    replicated_tensor_sharding: bool = False
    gradient_accumulation: int = 1
    device_iterations: int = 1
    eight_bit_io: bool = False
    io_tiles: int = 0
    loader_mode: str = "sync"  # poptorch.DataLoaderMode: sync | async
    loader_workers: int = 0  # poptorch.DataLoader num_workers
    micro_batch: int | None = None  # None: the problem's batch_size (the knob is off by default)
    # The vocabulary projection as this many serialised matmuls (optimum-graphcore's
    # embedding_serialization_factor; 1: one matmul). hf: models with a vocabulary head only.
    embedding_serialization: int = 1
    # The token embedding as this many masked look-ups (optimum-graphcore's SerializedEmbedding,
    # same IPUConfig factor); hf: models without a vocabulary head only.
    input_embedding_serialization: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "splits", tuple(self.splits))
        object.__setattr__(self, "checkpoints", tuple(self.checkpoints))
        amp = tuple(float(a) for a in self.available_memory_proportion)
        if not amp:
            amp = (DEFAULT_AMP,) * max(1, self.ipus_per_replica)
        object.__setattr__(self, "available_memory_proportion", amp)
        if isinstance(self.loss_scaling, int) and not isinstance(self.loss_scaling, bool):
            object.__setattr__(self, "loss_scaling", float(self.loss_scaling))

    # Derived views used across the code base.
    @property
    def half_weights(self) -> bool:
        return self.precision.endswith(".16")

    @property
    def half_compute(self) -> bool:
        return self.precision.startswith("16.")

    @property
    def total_ipus(self) -> int:
        return self.ipus_per_replica * self.replicas

    @property
    def reserved_ipus(self) -> int:
        """What PopTorch acquires on hardware: a power of two, the total rounded up when the
        options say autoRoundNumIPUs(True), which the export does for any other count."""
        return 1 << (self.total_ipus - 1).bit_length()

    @property
    def pipelined(self) -> bool:
        return self.execution == "pipelined" and self.ipus_per_replica > 1

    @property
    def effective_recompute(self) -> str:
        """What PopTorch will do: 'default' is Pipeline on a multi-IPU pipeline, else none."""
        return effective_recompute(self.recompute, self.pipelined)

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def to_dict(self, every_field: bool = False) -> dict[str, Any]:
        """The config as stored; `every_field`: with the fields a stored dict leaves out at
        their defaults too, so two configs compare key by key (a change to a knob omitted at
        its default is a change all the same)."""
        d = dataclasses.asdict(self)
        for key in ("splits", "checkpoints", "available_memory_proportion"):
            d[key] = list(d[key])
        if every_field:
            return d
        if d["micro_batch"] is None:
            del d["micro_batch"]
        for (
            knob
        ) in SPEC:  # knobs newer than most records: configs that leave them off keep their dict
            if knob.omit_at_default and d[knob.name] == knob.space_default:
                del d[knob.name]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "[config]") -> Config:
        return cls(**parse_fields(cls, data, where))


@dataclass(frozen=True)
class ConfigFile:
    problem: Problem | None
    config: Config | None


def load_config_file(path: str | Path) -> ConfigFile:
    """Read a TOML file with optional [problem] and [config] tables."""
    path = Path(path)
    data = read_toml(path, str(path), "a config file")
    unknown = sorted(set(data) - {"problem", "config"})
    if unknown:
        raise UsageError(f"{path}: unknown table '{unknown[0]}' (expected [problem] and [config])")
    problem = (
        Problem.from_dict(data["problem"], f"{path} [problem]") if "problem" in data else None
    )
    config = Config.from_dict(data["config"], f"{path} [config]") if "config" in data else None
    return ConfigFile(problem, config)
