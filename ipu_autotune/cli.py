"""Command line: `ipu-autotune MODEL --batch-size N` (tune), estimate, plan, export, show,
studies, calibration.

Exit codes: 0 done, 2 bad input (one line on stderr naming the fix), 3 the study ran but
no trial fits (the closest one and what would help are printed), 4 `estimate` answered
for a config that breaks a recipe rule (each rule printed;
rules/cross_field.EXIT_BREAKS_RECIPE), 5 `verify` (or `tune --verify`) judged the tuned recipe
diverged, stalled or lagging (verification.verdict.EXIT_FAILED_CHECK), 6 `verify` could not
judge: the baseline did not learn (verification.verdict.EXIT_INCONCLUSIVE), 130 interrupted,
1 an unexpected error (traceback with --debug).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Callable
from typing import NoReturn

from rich.console import Console
from rich.markup import escape

from .errors import UsageError
from .interrupt import Explained, while_running
from .options import OPTIONS, CommandOptions
from .options.parser import add_options, options_from
from .present.display import terminal_text
from .version import __version__

SUBCOMMANDS = (
    "tune",
    "estimate",
    "plan",
    "export",
    "show",
    "studies",
    "numerics",
    "report",
    "calibration",
    "verify",
)


# --- argument parsing ------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are our one-line UsageError (exit 2, no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


#: each subcommand's one-line help and its description; its flags are its options' fields
#: (options/table.py)
_COMMANDS = {
    "tune": (
        "run (or resume) a tuning study",
        "Tune a model: an Optuna study from the baseline to a fast configuration that fits. "
        "Resumes when the study exists.",
    ),
    "estimate": (
        "memory and speed of one configuration",
        "Measure one configuration (from --config and/or --set) with a backend; --json prints one "
        "Measurement.",
    ),
    "plan": (
        "how many IPUs the model needs, and how fast it is on each (estimated)",
        "An estimate-only search at 1, 2, 4, 8, 16, 32 and 64 IPUs (the micro-batch halved from "
        "--batch-size down to 1 until something fits), no study and no compile: the smallest "
        "size that fits, the best configuration and throughput at each, and where nothing fits, "
        "why. --ipus is not used.",
    ),
    "export": ("write a trial's configuration as code, TOML or JSON", None),
    "show": ("a study's trials and its best configuration", None),
    "report": ("a study as one self-contained HTML page with plots", None),
    "calibration": (
        "the calibration store: what compiles reported, across studies",
        "Show the calibration store (records per target and SDK, the fitted correction, its "
        "leave-one-study-out error) or --forget part of it.",
    ),
    "studies": ("the studies in a storage", None),
    "numerics": (
        "loss scale, stochastic rounding and partials advice",
        "Gradient statistics on the CPU, and what they mean for FP16.",
    ),
    "verify": (
        "train the tuned recipe beside the baseline's, FP16 emulated on the CPU",
        "K steps of the baseline's and the tuned recipe on your data (--data) on the CPU, with "
        "the IPU's FP16 numerics emulated; a verdict against two baseline seeds. Exit 0 at "
        "parity, 5 when the tuned recipe diverged, stalled or lags.",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ipu-autotune",
        description="Find a PopTorch configuration that fits in IPU memory and runs fast.",
        epilog="Run 'ipu-autotune COMMAND --help' for a command's options. "
        "'ipu-autotune MODEL ...' is short for 'ipu-autotune tune MODEL ...'.",
    )
    parser.add_argument("--version", action="version", version=f"ipu-autotune {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for command, (help, description) in _COMMANDS.items():
        p = sub.add_parser(command, help=help, description=description)
        add_options(p, OPTIONS[command])
        p.add_argument("--debug", action="store_true", help="show tracebacks")
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
        raise UsageError(
            f"unknown command '{word}'; did you mean '{close[0]}'? "
            f"(commands: {', '.join(SUBCOMMANDS)}; a model name starts a tune)"
        )


# --- entry point ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    typed = list(argv)  # as the user typed it: what an interrupt's "run again" line repeats
    implicit_tune = bool(argv) and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS
    if implicit_tune:
        argv.insert(0, "tune")
    debug = "--debug" in argv
    err = Console(stderr=True, highlight=False)
    warnings.filterwarnings("ignore", module="optuna")
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own output says what happens
        if implicit_tune:
            _check_not_a_misspelt_command(argv[1])
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        options = options_from(args)
        # only the command asked for: `show` or `studies` never import torch (2 s of CPU)
        run: Callable[[CommandOptions], int] = importlib.import_module(
            f".commands.{args.command}", __package__
        ).run
        return run(options)
    except UsageError as exc:
        # One line: control characters from a file name, a study name or a stored value are
        # shown escaped (display.terminal_text), never acted on by the terminal.
        err.print(f"[bold red]error:[/] {escape(terminal_text(exc))}", soft_wrap=True)
        return 2
    except Explained:  # the command said what the interrupt left and how to go on
        return 130
    except KeyboardInterrupt:
        err.print(while_running(typed), soft_wrap=True, markup=False)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: say so plainly, with the traceback on request
        if debug:
            raise
        err.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {escape(terminal_text(exc))} "
            "(run with --debug for the traceback)",
            soft_wrap=True,
        )
        return 1
