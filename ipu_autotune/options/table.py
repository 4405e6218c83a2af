"""The option table: one frozen dataclass per command (`TuneOptions`, `EstimateOptions`, ...),
built once, by the command line from its parsed flags (parser.options_from), by the Python API
from an object and keywords (keywords.with_keywords) or by hand, and read by the command
(`commands.<name>.run(options)`). What several commands share (the Problem's flags, the
measuring commands', the defaults) is shared.py's.

A field is the option's one definition: its default, and for a flag (spec.option) its flags,
the check its value goes through and its help; the parser is generated from the fields
(parser.add_options). A field without a flag is a default the command takes as it is
(`estimate` compiles with tune's --compile-timeout default, say). Every value is checked when
the object is made, however it is made (`CommandOptions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..verification.defaults import DEFAULT_STEPS
from .shared import (
    BACKENDS,
    DEFAULT_COMPILE_TIMEOUT,
    DEFAULT_HEADROOM,
    DEFAULT_HEARTBEAT,
    DEFAULT_OUT,
    DEFAULT_SCREEN_MARGIN,
    DEFAULT_STORAGE,
    DEFAULT_TRIALS,
    CommandOptions,
    MeasureOptions,
    ProblemOptions,
    choice_option,
    fit_confidence_option,
    fraction,
    positive_int,
    storage_option,
)
from .spec import option, required, switch
from .values import micro_batch_knob, number, positive, whole_number


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
    storage: str = storage_option(
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

    backend: str = choice_option(BACKENDS, "estimate")
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

    fit_confidence: float = fit_confidence_option()
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

    storage: str = storage_option()
    study: str = required()
    trial: int | None = option(None, "trial number (default: the best)", check=whole_number)
    format: str = choice_option(
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

    storage: str = storage_option()
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

    storage: str = storage_option()
    study: str = required()
    output: str | None = option(
        None, "where to write it (default STUDY.html)", flags=("-o", "--output"), metavar="FILE"
    )


@dataclass(frozen=True)
class CalibrationOptions(CommandOptions):
    command: ClassVar[str] = "calibration"

    storage: str = storage_option("the study storage the store sits beside")
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

    storage: str = storage_option()
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
    storage: str = storage_option()
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
