"""Command line: `ipu-autotune MODEL --batch-size N` (tune), estimate, plan, export, show, studies, calibration.

Exit codes: 0 done, 2 bad input (one line on stderr naming the fix), 3 the study ran but
no trial fits (the closest one and what would help are printed), 4 `estimate` answered
for a config that breaks a recipe rule (each rule printed; rules/cross_field.EXIT_BREAKS_RECIPE),
5 `verify` (or `tune --verify`) judged the tuned recipe diverged, stalled or lagging
(verification.verdict.EXIT_FAILED_CHECK), 130 interrupted, 1 an unexpected error (traceback with --debug).
"""

from __future__ import annotations

import argparse
import sys
import warnings

from rich.console import Console
from rich.markup import escape

from .args import (
    DEFAULT_FIT_CONFIDENCE,
    DEFAULT_HEADROOM,
    DEFAULT_HEARTBEAT,
    DEFAULT_OUT,
    DEFAULT_STORAGE,
    DEFAULT_TRIALS,
    add_data_arg,
    add_problem_args,
    positive,
)
from .errors import UsageError
from .present.display import terminal_text
from .version import __version__

SUBCOMMANDS = ("tune", "estimate", "plan", "export", "show", "studies", "numerics", "report", "calibration",
               "verify")


# --- argument parsing ------------------------------------------------------------------------

_positive_int = positive(int)


def _number_in(low: float, high: float, what: str):
    """An argparse type: a number in [low, high], refused in one line naming the range."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} in [{low:g}, {high:g}], got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {what} in [{low:g}, {high:g}], got {value}")
        return value
    return parse


_fraction = _number_in(0, 0.5, "a number")
_confidence = _number_in(0, 1, "a chance")


def add_fit_confidence(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fit-confidence", type=_confidence, default=DEFAULT_FIT_CONFIDENCE, metavar="P",
                   help="estimate backend: a configuration counts as fitting only when its chance to fit, by "
                        f"the estimate's calibrated error bar, is at least P (default {DEFAULT_FIT_CONFIDENCE}; "
                        "docs/estimator.md)")


def _micro_batch_knob(text: str):
    """'search', or 'LOW-HIGH': the micro_batch knob of the search space."""
    if text == "search":
        return text
    low, sep, high = text.partition("-")
    try:
        low_n, high_n = int(low), int(high if sep else low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'search' or a range such as 8-128, got {text!r}") from None
    if not 1 <= low_n <= high_n:
        raise argparse.ArgumentTypeError(f"expected 1 <= LOW <= HIGH, got {text!r}")
    return {"low": low_n, "high": high_n, "log": True}


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are our one-line UsageError (exit 2, no usage dump)."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ipu-autotune",
        description="Find a PopTorch configuration that fits in IPU memory and runs fast.",
        epilog="Run 'ipu-autotune COMMAND --help' for a command's options. "
               "'ipu-autotune MODEL ...' is short for 'ipu-autotune tune MODEL ...'.",
    )
    parser.add_argument("--version", action="version", version=f"ipu-autotune {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    tune = sub.add_parser("tune", help="run (or resume) a tuning study",
                          description="Tune a model: an Optuna study from the baseline to a fast "
                                      "configuration that fits. Resumes when the study exists.")
    add_problem_args(tune)
    add_data_arg(tune)
    tune.add_argument("--baseline", metavar="FILE", help="config TOML of your starting point "
                      "(default: FP32, defaults, split by block count)")
    tune.add_argument("--space", metavar="FILE", help="search space TOML merged over the built-in one")
    tune.add_argument("--micro-batch", type=_micro_batch_knob, default=None, metavar="search|LOW-HIGH",
                      help="search the micro-batch too (off by default: --batch-size is kept): 'search' "
                           "tries powers of two, LOW-HIGH a range")
    tune.add_argument("--trials", type=_positive_int, default=DEFAULT_TRIALS,
                      help=f"new trials to run (default {DEFAULT_TRIALS})")
    tune.add_argument("--jobs", type=_positive_int, default=1, metavar="N",
                      help="trials at once on this host, one worker process (one compile) each; "
                           "needs an SQLite or journal storage (default 1)")
    tune.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # started by --jobs
    tune.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                      help="stop starting new trials after this long")
    tune.add_argument("--storage", default=DEFAULT_STORAGE,
                      help=f"Optuna storage URL (default {DEFAULT_STORAGE}); journal:///path for a "
                           "shared file system, postgresql://... for many hosts")
    tune.add_argument("--study", help="study name (default from the problem, e.g. resnet101-bs64-2ipu-mk2)")
    tune.add_argument("--heartbeat", type=_positive_int, default=DEFAULT_HEARTBEAT, metavar="SECONDS",
                      help=f"workers beat this often (default {DEFAULT_HEARTBEAT}); a trial whose worker misses "
                           "3 beats is failed and retried by another. Set when the study is created; "
                           "later workers follow the study's")
    tune.add_argument("--backend", choices=("auto", "estimate", "poptorch"), default="auto",
                      help="auto: PopTorch when the SDK is importable, else the estimator")
    tune.add_argument("--screen-margin", type=float, default=0.25,
                      help="poptorch backend: skip compiles the estimator puts this far over memory")
    tune.add_argument("--no-screen", action="store_true", help="poptorch backend: compile every candidate")
    tune.add_argument("--compile-timeout", type=float, default=3600.0, metavar="SECONDS",
                      help="poptorch backend: give up on one compile after this long")
    tune.add_argument("--headroom", type=_fraction, default=DEFAULT_HEADROOM,
                      help="estimates count as fitting only with this fraction of tile memory free "
                           f"(default {DEFAULT_HEADROOM}; compiles are exact and ignore it)")
    add_fit_confidence(tune)
    tune.add_argument("--no-numerics", action="store_true",
                      help="search loss scaling, stochastic rounding and partials instead of setting them "
                           "from the model's gradient statistics")
    tune.add_argument("--calibration-storage", default=None, metavar="URL",
                      help="the calibration store every compile is recorded in and the guide starts from "
                           "(default: beside --storage, e.g. sqlite:///ipu-autotune-calibration.db)")
    tune.add_argument("--no-calibration", action="store_true",
                      help="neither read nor write the calibration store")
    tune.add_argument("--verify", action="store_true",
                      help="after tuning, train the best config's recipe beside the baseline's on --data with "
                           "the IPU's FP16 numerics emulated (ipu-autotune verify, its defaults)")
    tune.add_argument("--verify-samples", type=_positive_int, default=None, metavar="N",
                      help="--verify: at most this many samples per run (default: 200 updates of the larger "
                           "global batch)")
    tune.add_argument("--seed", type=int, default=None, help="sampler seed, for repeatable studies")
    tune.add_argument("--out", default=None, metavar="DIR",
                      help=f"where the best config, snippet and trial log go (default {DEFAULT_OUT}/STUDY); "
                           "given, it also gets report.html")
    tune.add_argument("--quiet", "-q", action="store_true", help="only the final result line")
    tune.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_common(tune)

    est = sub.add_parser("estimate", help="memory and speed of one configuration",
                         description="Measure one configuration (from --config and/or --set) "
                                     "with a backend; --json prints one Measurement.")
    add_problem_args(est, model_required=False)
    add_data_arg(est)
    est.add_argument("--config", metavar="FILE", help="TOML with [config] (and optionally [problem])")
    est.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set precision=16.16 --set splits=layer3.8")
    est.add_argument("--backend", choices=("auto", "estimate", "poptorch"), default="estimate")
    est.add_argument("--headroom", type=_fraction, default=DEFAULT_HEADROOM,
                     help="the search's tile memory kept free for estimation error: the verdict is by the "
                          f"tile limit, a line says when this headroom would reject it (default {DEFAULT_HEADROOM})")
    add_fit_confidence(est)
    est.add_argument("--json", action="store_true", help="print exactly one Measurement as JSON")
    _add_common(est)

    pln = sub.add_parser("plan", help="how many IPUs the model needs, and how fast it is on each (estimated)",
                         description="An estimate-only search at 1, 2, 4, 8, 16, 32 and 64 IPUs (the micro-batch "
                                     "halved from --batch-size down to 1 until something fits), no study and no compile: the "
                                     "smallest size that fits, the best configuration and throughput at each, and "
                                     "where nothing fits, why. --ipus is not used.")
    add_problem_args(pln)
    add_fit_confidence(pln)
    pln.add_argument("--headroom", type=_fraction, default=DEFAULT_HEADROOM,
                     help=f"tile memory to keep free for estimation error (default {DEFAULT_HEADROOM})")
    pln.add_argument("-o", "--output", metavar="FILE", help="also write the plan as HTML, with its plot")
    pln.add_argument("--json", action="store_true")
    _add_common(pln)

    exp = sub.add_parser("export", help="write a trial's configuration as code, TOML or JSON")
    exp.add_argument("--storage", default=DEFAULT_STORAGE)
    exp.add_argument("--study", required=True)
    exp.add_argument("--trial", type=int, default=None, help="trial number (default: the best)")
    exp.add_argument("--format", choices=("python", "toml", "json", "ipu-config", "ipu-trainer"), default="python",
                     help="ipu-config: an optimum-graphcore ipu_config.json (IPUConfig fields only); "
                          "ipu-trainer: the IPUTrainer code that trains with it")
    exp.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    _add_common(exp)

    show = sub.add_parser("show", help="a study's trials and its best configuration")
    show.add_argument("--storage", default=DEFAULT_STORAGE)
    show.add_argument("--study", required=True)
    show.add_argument("--trial", type=int, default=None, metavar="N",
                      help="one trial in full: its whole configuration and memory per IPU")
    show.add_argument("--json", action="store_true")
    _add_common(show)

    rep = sub.add_parser("report", help="a study as one self-contained HTML page with plots")
    rep.add_argument("--storage", default=DEFAULT_STORAGE)
    rep.add_argument("--study", required=True)
    rep.add_argument("-o", "--output", metavar="FILE", help="where to write it (default STUDY.html)")
    _add_common(rep)

    cal = sub.add_parser("calibration", help="the calibration store: what compiles reported, across studies",
                         description="Show the calibration store (records per target and SDK, the fitted "
                                     "correction, its leave-one-study-out error) or --forget part of it.")
    cal.add_argument("--storage", default=DEFAULT_STORAGE, help="the study storage the store sits beside")
    cal.add_argument("--calibration-storage", default=None, metavar="URL",
                     help="the store itself (default: beside --storage)")
    cal.add_argument("--target", default=None, help="only this IPU generation (mk1, mk2, bow)")
    cal.add_argument("--sdk", default=None, help="only this SDK, e.g. poptorch-3.4.0")
    cal.add_argument("--study", default=None, help="only this study's records")
    cal.add_argument("--forget", action="store_true", help="remove the records --target/--sdk/--study name")
    cal.add_argument("--json", action="store_true")
    _add_common(cal)

    studies = sub.add_parser("studies", help="the studies in a storage")
    studies.add_argument("--storage", default=DEFAULT_STORAGE)
    studies.add_argument("--json", action="store_true")
    _add_common(studies)

    try:
        from .commands import numerics as numerics_command

        num = sub.add_parser("numerics", help="loss scale, stochastic rounding and partials advice",
                             description="Gradient statistics on the CPU, and what they mean for FP16.")
        numerics_command.add_arguments(num)
        _add_common(num)
    except ImportError:
        pass
    from .commands import verify as verify_command

    ver = sub.add_parser("verify", help="train the tuned recipe beside the baseline's, FP16 emulated on the CPU",
                         description="K steps of the baseline's and the tuned recipe on your data (--data) on "
                                     "the CPU, with the IPU's FP16 numerics emulated; a verdict against two "
                                     "baseline seeds. Exit 0 at parity, 5 when the tuned recipe diverged, "
                                     "stalled or lags.")
    verify_command.add_arguments(ver)
    _add_common(ver)
    return parser


def _check_not_a_misspelt_command(word: str) -> None:
    """'ipu-autotune shwo' reads as tuning a model named shwo: when the word is close to a
    subcommand and names no model (torchvision's, module:factory, hf:, a path), say which
    command was meant instead of asking for the batch size."""
    import difflib
    import os

    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.7)
    if not close or ":" in word or os.sep in word or os.path.exists(word):
        return
    from .models.zoo import torchvision_models

    if word not in torchvision_models():
        raise UsageError(f"unknown command '{word}'; did you mean '{close[0]}'? "
                         f"(commands: {', '.join(SUBCOMMANDS)}; a model name starts a tune)")


# --- entry point ------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    implicit_tune = bool(argv) and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS
    if implicit_tune:
        argv.insert(0, "tune")
    debug = "--debug" in argv
    err = Console(stderr=True, highlight=False)
    warnings.filterwarnings("ignore", module="optuna")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own output says what happens
    try:
        if implicit_tune:
            _check_not_a_misspelt_command(argv[1])
        parser = build_parser()
        args = parser.parse_args(argv)
        args.argv = argv  # --jobs starts workers with the same options
        if args.command is None:
            parser.print_help()
            return 2
        from .commands import (
            calibration,
            estimate,
            export,
            numerics,
            plan,
            report,
            show,
            studies,
            tune,
            verify,
        )

        run = {"tune": tune, "estimate": estimate, "plan": plan, "export": export, "show": show, "studies": studies,
               "numerics": numerics, "report": report, "calibration": calibration,
               "verify": verify}[args.command].run
        return run(args)
    except UsageError as exc:
        # One line: control characters from a file name, a study name or a stored value are
        # shown escaped (display.terminal_text), never acted on by the terminal.
        err.print(f"[bold red]error:[/] {escape(terminal_text(exc))}", soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: say so plainly, with the traceback on request
        if debug:
            raise
        err.print(f"[bold red]internal error:[/] {type(exc).__name__}: {escape(terminal_text(exc))} "
                  "(run with --debug for the traceback)", soft_wrap=True)
        return 1
