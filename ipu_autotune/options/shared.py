"""What the commands' options share: their defaults, the helpers that declare an option, the
base every options class is (`CommandOptions`: values checked as their flags' are), the
Problem's flags (`ProblemOptions`) and the measuring commands' (`MeasureOptions`). Each
command's own class is in table.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..models.hf_config import DEFAULT_SEQ_LEN, TASKS
from ..parsing import OPTIMIZERS, TARGETS, TRAINERS
from .spec import option, specs
from .values import number, number_in, one_of, positive, shape

DEFAULT_STORAGE = "sqlite:///ipu-autotune.db"
DEFAULT_TRIALS = 60  # study/planning.DEFAULT_TRIALS: plan searches as tune does
DEFAULT_OUT = "ipu-autotune-out"
#: seconds between a worker's heartbeats (storage.HEARTBEAT_INTERVAL_S)
DEFAULT_HEARTBEAT = 10
#: the estimator's verdicts near capacity are not to be trusted with hardware time
DEFAULT_HEADROOM = 0.05
#: the chance to fit by the error bar an estimate needs to count as fitting
#: (backends/estimate/error_bars.py)
DEFAULT_FIT_CONFIDENCE = 0.9
DEFAULT_SCREEN_MARGIN = 0.25
DEFAULT_COMPILE_TIMEOUT = 3600.0
BACKENDS = ("auto", "estimate", "poptorch")

positive_int = positive(int)
fraction = number_in(0, 0.5, "a number")
HOST = "data and host (end-to-end throughput)"


def choice_option(
    choices: Iterable[str], default: str | None = None, help: str | None = None, **spec: Any
) -> Any:
    return option(default, help, check=one_of(tuple(choices)), choices=tuple(choices), **spec)


def fit_confidence_option() -> Any:
    return option(
        DEFAULT_FIT_CONFIDENCE,
        "estimate backend: a configuration counts as fitting only when its chance "
        "to fit, by the estimate's calibrated error bar, is at least P (default "
        f"{DEFAULT_FIT_CONFIDENCE}; docs/estimator.md)",
        check=number_in(0, 1, "a chance"),
        metavar="P",
    )


def storage_option(help: str | None = None) -> Any:
    return option(DEFAULT_STORAGE, help)


@dataclass(frozen=True)
class CommandOptions:
    """What every command's options share: the command they are for, and values checked as
    their flags' are when the object is made (a value given as text is read as the flag's:
    `"3,32,32"` becomes `(3, 32, 32)`). `model_required`: the command needs the model;
    `hardware = False` leaves out the IPUs, the training recipe and the host, for commands
    that run on the CPU only."""

    command: ClassVar[str] = ""
    model_required: ClassVar[bool] = True
    hardware: ClassVar[bool] = True

    def __post_init__(self) -> None:
        prog = f"ipu-autotune {self.command}"
        for name, spec in specs(type(self)).items():
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, spec.parse(value, prog))


@dataclass(frozen=True)
class ProblemOptions(CommandOptions):
    """The Problem's flags (problem_flags.problem_from_options). Unset ones are None: the
    config file's [problem] or the Problem's defaults."""

    model: str | None = option(
        None,
        "torchvision model name (resnet50, vit_b_16, ...), hf:NAME, or package.module:factory "
        "(the module must be importable: installed or on PYTHONPATH, e.g. PYTHONPATH=.)",
        kind="positional",
        with_model=True,
    )
    batch_size: int | None = option(
        None,
        "micro-batch per replica",
        flags=("--batch-size", "-b"),
        check=positive_int,
        with_model=True,
    )
    ipus: int | None = option(
        None, "IPUs available in total (default 2)", check=positive_int, hardware=True
    )
    input_shape: tuple[int, ...] | None = option(
        None, "one sample's shape, e.g. 3,224,224", check=shape, exclusive="shape"
    )
    image_size: int | None = option(
        None,
        "square RGB images of this size (default 64 for CNNs, the workshop's "
        "size; 224 for ViT/Swin)",
        check=positive_int,
        exclusive="shape",
    )
    num_classes: int | None = option(None, "classes (default 1000)", check=positive_int)
    optimizer: str | None = choice_option(OPTIMIZERS, help="optimizer (default adamw)")
    target: str | None = choice_option(TARGETS, help="IPU generation (default mk2)", hardware=True)
    global_batch: int | None = option(
        None,
        "fix micro-batch x gradient accumulation x replicas to this",
        check=positive_int,
        hardware=True,
    )
    trainer: str | None = choice_option(
        TRAINERS,
        help="hf: models: what trains the result: poptorch (the exported PopTorch snippet, the "
        "default) or optimum (optimum-graphcore's IPUTrainer with the exported "
        "ipu_config.json; the search keeps to what IPUConfig can express)",
        hardware=True,
    )
    task: str | None = choice_option(
        TASKS,
        help="hf: models: the head and loss trained (default: sequence-classification for "
        "encoders, causal-lm for decoders, seq2seq-lm for encoder-decoders, "
        "image-classification for ViT)",
    )
    seq_len: int | None = option(
        None, f"hf: models: tokens per sample (default {DEFAULT_SEQ_LEN})", check=positive_int
    )
    decoder_seq_len: int | None = option(
        None,
        "hf: seq2seq-lm: decoder tokens per sample (default: --seq-len, at most 128)",
        check=positive_int,
        metavar="N",
    )
    max_predictions: int | None = option(
        None,
        "hf: masked-lm: gather N masked positions per sequence before the head, as Graphcore "
        "pretrains BERT (20 at --seq-len 128, 76 at 512; default: every position)",
        check=positive_int,
        metavar="N",
    )
    attention_dropout: float | None = option(
        None,
        "hf: models: dropout on the attention probabilities (default: the checkpoint's; "
        "Graphcore pretrains BERT with 0)",
        check=number,
        metavar="P",
    )
    inputs: tuple[str, ...] | None = option(
        None,
        "a forward input of a module:factory model, one per input, in order, passed by name; "
        "SHAPE is one sample's, e.g. --input input_ids:128:int64 --input "
        "attention_mask:128:int64 (dtypes: int64 int32 float32 float16 bool)",
        flags=("--input",),
        kind="repeat",
        metavar="NAME:SHAPE:DTYPE",
    )
    dataset_size: int | None = option(
        None,
        "samples per epoch (default 50,000: the workshop's CIFAR-10); one call may not need more",
        check=positive_int,
        group=HOST,
        hardware=True,
    )
    host_memory: float | None = option(
        None,
        "host memory one call's samples may take, times the loader's buffers (default 32)",
        check=positive(float),
        metavar="GB",
        group=HOST,
        hardware=True,
    )
    max_global_batch: int | None = option(
        None,
        "ceiling on micro-batch x accumulation x replicas (default 2048; 256 when fine-tuning "
        "an hf: model for sequence-classification or question-answering; README, 'Training "
        "recipe')",
        check=positive_int,
        group=HOST,
        hardware=True,
    )


@dataclass(frozen=True)
class MeasureOptions(ProblemOptions):
    """What the commands that measure configurations share (tune, estimate): the host data, the
    backend and how it judges a fit. The PopTorch backend's settings are tune's flags."""

    data: str | None = option(
        None,
        "your Dataset or DataLoader: its host cost per sample is timed on this CPU "
        "(default: costs calibrated on the workshop's epoch times)",
        metavar="MODULE:FUNCTION",
    )
    backend: str = choice_option(
        BACKENDS, "auto", "auto: PopTorch when the SDK is importable, else the estimator"
    )
    headroom: float = DEFAULT_HEADROOM
    fit_confidence: float = fit_confidence_option()
    screen_margin: float = DEFAULT_SCREEN_MARGIN
    no_screen: bool = False
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT
    quiet: bool = False
    worker: bool = False  # a --jobs worker process (commands/tune_worker.py)
