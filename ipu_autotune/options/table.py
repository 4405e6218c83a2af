"""The option table: one frozen dataclass per command (`TuneOptions`, `EstimateOptions`, ...),
built once, by the command line from its parsed flags (parser.options_from), by the Python API
from an object and keywords (keywords.with_keywords) or by hand, and read by the command
(`commands.<name>.run(options)`).

A field is the option's one definition: its default, and for a flag (spec.option) its flags,
the check its value goes through and its help; the parser is generated from the fields
(parser.add_options). A field without a flag is a default the command takes as it is
(`estimate` compiles with tune's --compile-timeout default, say). Every value is checked when
the object is made, however it is made (`CommandOptions`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..models.hf_config import DEFAULT_SEQ_LEN, TASKS
from ..parsing import OPTIMIZERS, TARGETS, TRAINERS
from ..verification.defaults import DEFAULT_STEPS
from .spec import option, required, specs, switch
from .values import micro_batch_knob, number, number_in, one_of, positive, shape, whole_number

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


def _choice(
    choices: Iterable[str], default: str | None = None, help: str | None = None, **spec: Any
) -> Any:
    return option(default, help, check=one_of(tuple(choices)), choices=tuple(choices), **spec)


def _fit_confidence() -> Any:
    return option(
        DEFAULT_FIT_CONFIDENCE,
        "estimate backend: a configuration counts as fitting only when its chance "
        "to fit, by the estimate's calibrated error bar, is at least P (default "
        f"{DEFAULT_FIT_CONFIDENCE}; docs/estimator.md)",
        check=number_in(0, 1, "a chance"),
        metavar="P",
    )


def _storage(help: str | None = None) -> Any:
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
    optimizer: str | None = _choice(OPTIMIZERS, help="optimizer (default adamw)")
    target: str | None = _choice(TARGETS, help="IPU generation (default mk2)", hardware=True)
    global_batch: int | None = option(
        None,
        "fix micro-batch x gradient accumulation x replicas to this",
        check=positive_int,
        hardware=True,
    )
    trainer: str | None = _choice(
        TRAINERS,
        help="hf: models: what trains the result: poptorch (the exported PopTorch snippet, the "
        "default) or optimum (optimum-graphcore's IPUTrainer with the exported "
        "ipu_config.json; the search keeps to what IPUConfig can express)",
        hardware=True,
    )
    task: str | None = _choice(
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
    backend: str = _choice(
        BACKENDS, "auto", "auto: PopTorch when the SDK is importable, else the estimator"
    )
    headroom: float = DEFAULT_HEADROOM
    fit_confidence: float = _fit_confidence()
    screen_margin: float = DEFAULT_SCREEN_MARGIN
    no_screen: bool = False
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT
    quiet: bool = False
    worker: bool = False  # a --jobs worker process (commands/tune_worker.py)


@dataclass(frozen=True)
class TuneOptions(MeasureOptions):
    command: ClassVar[str] = "tune"

    headroom: float = option(
        DEFAULT_HEADROOM,
        "estimates count as fitting only with this fraction of tile memory "
        f"free (default {DEFAULT_HEADROOM}; compiles are exact and ignore it)",
        check=fraction,
    )
    screen_margin: float = option(
        DEFAULT_SCREEN_MARGIN,
        "poptorch backend: skip compiles the estimator puts this far over memory",
        check=number,
    )
    no_screen: bool = switch("poptorch backend: compile every candidate")
    compile_timeout: float = option(
        DEFAULT_COMPILE_TIMEOUT,
        "poptorch backend: give up on one compile after this long",
        check=number,
        metavar="SECONDS",
    )
    quiet: bool = switch("only the final result line", flags=("--quiet", "-q"))
    baseline: str | None = option(
        None,
        "config TOML of your starting point (default: FP32, defaults, split by block count)",
        metavar="FILE",
    )
    space: str | None = option(
        None, "search space TOML merged over the built-in one", metavar="FILE"
    )
    micro_batch: str | dict[str, Any] | None = option(
        None,
        "search the micro-batch too (off by default: --batch-size is kept): 'search' "
        "tries powers of two, LOW-HIGH a range",
        check=micro_batch_knob,
        metavar="search|LOW-HIGH",
    )
    trials: int = option(
        DEFAULT_TRIALS, f"new trials to run (default {DEFAULT_TRIALS})", check=positive_int
    )
    jobs: int = option(
        1,
        "trials at once on this host, one worker process (one compile) each; needs an SQLite or "
        "journal storage (default 1)",
        check=positive_int,
        metavar="N",
    )
    timeout: float | None = option(
        None, "stop starting new trials after this long", check=number, metavar="SECONDS"
    )
    storage: str = _storage(
        f"Optuna storage URL (default {DEFAULT_STORAGE}); journal:///path for a shared file "
        "system, postgresql://... for many hosts"
    )
    study: str | None = option(
        None, "study name (default from the problem, e.g. resnet101-bs64-2ipu-mk2)"
    )
    heartbeat: int = option(
        DEFAULT_HEARTBEAT,
        f"workers beat this often (default {DEFAULT_HEARTBEAT}); a trial "
        "whose worker misses 3 beats is failed and retried by another. Set when the study is "
        "created; later workers follow the study's",
        check=positive_int,
        metavar="SECONDS",
    )
    no_numerics: bool = switch(
        "search loss scaling, stochastic rounding and partials instead of setting them from "
        "the model's gradient statistics"
    )
    calibration_storage: str | None = option(
        None,
        "the calibration store every compile is recorded in and the guide starts from (default: "
        "beside --storage, e.g. sqlite:///ipu-autotune-calibration.db)",
        metavar="URL",
    )
    no_calibration: bool = switch("neither read nor write the calibration store")
    verify: bool = switch(
        "after tuning, train the best config's recipe beside the baseline's on --data with the "
        "IPU's FP16 numerics emulated (ipu-autotune verify, its defaults)"
    )
    verify_samples: int | None = option(
        None,
        "--verify: at most this many samples per run (default: 200 updates "
        "of the larger global batch)",
        check=positive_int,
        metavar="N",
    )
    seed: int | None = option(None, "sampler seed, for repeatable studies", check=whole_number)
    out: str | None = option(
        None,
        f"where the best config, snippet and trial log go (default {DEFAULT_OUT}/STUDY); "
        "given, it also gets report.html",
        metavar="DIR",
    )
    json: bool = switch("print the result as JSON")


@dataclass(frozen=True)
class EstimateOptions(MeasureOptions):
    command: ClassVar[str] = "estimate"
    model_required: ClassVar[bool] = False

    backend: str = _choice(BACKENDS, "estimate")
    config: str | None = option(
        None, "TOML with [config] (and optionally [problem])", metavar="FILE"
    )
    set: tuple[str, ...] = option(
        (),
        "override a config key, e.g. --set precision=16.16 --set splits=layer3.8",
        kind="repeat",
        metavar="KEY=VALUE",
    )
    headroom: float = option(
        DEFAULT_HEADROOM,
        "the search's tile memory kept free for estimation error: the "
        "verdict is by the tile limit, a line says when this headroom would reject it "
        f"(default {DEFAULT_HEADROOM})",
        check=fraction,
    )
    json: bool = switch("print exactly one Measurement as JSON")


@dataclass(frozen=True)
class PlanOptions(ProblemOptions):
    command: ClassVar[str] = "plan"

    fit_confidence: float = _fit_confidence()
    headroom: float = option(
        DEFAULT_HEADROOM,
        f"tile memory to keep free for estimation error (default {DEFAULT_HEADROOM})",
        check=fraction,
    )
    output: str | None = option(
        None,
        "also write the plan as HTML, with its plot",
        flags=("-o", "--output"),
        metavar="FILE",
    )
    json: bool = switch()


@dataclass(frozen=True)
class ExportOptions(CommandOptions):
    command: ClassVar[str] = "export"

    storage: str = _storage()
    study: str = required()
    trial: int | None = option(None, "trial number (default: the best)", check=whole_number)
    format: str = _choice(
        ("python", "toml", "json", "ipu-config", "ipu-trainer"),
        "python",
        "ipu-config: an optimum-graphcore ipu_config.json (IPUConfig fields only); ipu-trainer: "
        "the IPUTrainer code that trains with it",
    )
    output: str | None = option(
        None, "write here instead of stdout", flags=("-o", "--output"), metavar="FILE"
    )


@dataclass(frozen=True)
class ShowOptions(CommandOptions):
    command: ClassVar[str] = "show"

    storage: str = _storage()
    study: str = required()
    trial: int | None = option(
        None,
        "one trial in full: its whole configuration and memory per IPU",
        check=whole_number,
        metavar="N",
    )
    json: bool = switch()


@dataclass(frozen=True)
class ReportOptions(CommandOptions):
    command: ClassVar[str] = "report"

    storage: str = _storage()
    study: str = required()
    output: str | None = option(
        None, "where to write it (default STUDY.html)", flags=("-o", "--output"), metavar="FILE"
    )


@dataclass(frozen=True)
class CalibrationOptions(CommandOptions):
    command: ClassVar[str] = "calibration"

    storage: str = _storage("the study storage the store sits beside")
    calibration_storage: str | None = option(
        None, "the store itself (default: beside --storage)", metavar="URL"
    )
    target: str | None = option(None, "only this IPU generation (mk1, mk2, bow)")
    sdk: str | None = option(None, "only this SDK, e.g. poptorch-3.4.0")
    study: str | None = option(None, "only this study's records")
    forget: bool = switch("remove the records --target/--sdk/--study name")
    json: bool = switch()


@dataclass(frozen=True)
class StudiesOptions(CommandOptions):
    command: ClassVar[str] = "studies"

    storage: str = _storage()
    json: bool = switch()


@dataclass(frozen=True)
class NumericsOptions(ProblemOptions):
    command: ClassVar[str] = "numerics"
    hardware: ClassVar[bool] = False

    lr: float | None = option(
        None,
        "learning rate (default 0.1 x batch/256 for SGD, 1e-3 for the others)",
        check=positive(float),
    )
    steps: int = option(3, "training steps to measure (default 3)", check=positive_int)
    data: str | None = option(
        None,
        "function returning (inputs, labels) batches (default: random inputs and labels)",
        metavar="MODULE:FUNCTION",
    )
    seed: int = option(0, "seed for the initialisation and random data", check=whole_number)
    json: bool = switch("print the advice as one JSON object")


@dataclass(frozen=True)
class VerifyOptions(ProblemOptions):
    command: ClassVar[str] = "verify"
    hardware: ClassVar[bool] = False
    model_required: ClassVar[bool] = False

    study: str | None = option(None, "verify this study's best trial against its baseline trial")
    storage: str = _storage()
    baseline: str | None = option(
        None,
        "config TOML or JSON export of the starting point (default with --tuned: "
        "FP32, micro-batch x 1 x 1)",
        metavar="FILE",
    )
    tuned: str | None = option(
        None, "config TOML or JSON export to verify (instead of --study)", metavar="FILE"
    )
    data: str | None = option(
        None,
        "your Dataset, DataLoader or iterable of (inputs, labels): what both recipes train on",
        metavar="MODULE:FUNCTION",
    )
    steps: int = option(
        DEFAULT_STEPS,
        "optimizer steps of the recipe with the larger global batch (default "
        f"{DEFAULT_STEPS}); the other sees as many samples",
        check=positive_int,
        metavar="K",
    )
    samples: int | None = option(
        None,
        "at most this many samples per run (bounds the time)",
        check=positive_int,
        metavar="N",
    )
    lr: float | None = option(
        None,
        "your learning rate at the baseline's global batch (default: the export's "
        "make_optimizer default); the tuned recipe's is scaled from it as the export does",
        check=positive(float),
    )
    seed: int = option(
        0, "seed of the first runs (the second baseline: seed + 1)", check=whole_number
    )
    quiet: bool = switch("only the verdict line", flags=("--quiet", "-q"))
    json: bool = switch("print the verdict, curves included, as JSON")


#: each subcommand's options
OPTIONS: dict[str, type[CommandOptions]] = {
    cls.command: cls
    for cls in (
        TuneOptions,
        EstimateOptions,
        PlanOptions,
        ExportOptions,
        ShowOptions,
        StudiesOptions,
        NumericsOptions,
        ReportOptions,
        CalibrationOptions,
        VerifyOptions,
    )
}
