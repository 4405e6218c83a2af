"""`ipu-autotune MODEL --batch-size N` (tune): problem → space → study → runner → report,
each step a call into the library. The steps before the trials are tune_steps.py's, the
files, summary and exit code after them tune_report.py's, the resume command tune_resume.py's."""

from __future__ import annotations

import pickle
import signal
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import optuna
from rich.console import Console
from rich.markup import escape

from ..backends.base import Backend
from ..calibration import session as calibration
from ..interrupt import Explained
from ..options import TuneOptions
from ..present import live_view, ui
from ..present.display import terminal_text
from ..present.tune_summary import print_header
from ..problem import Problem
from ..study import parallel, records as st
from ..study.records import TrialRecord
from ..study.runner import Runner
from . import tune_steps as steps
from .common import (
    console_for,
    measuring_backend,
    print_unreadable,
    screened,
    warn,
)
from .tune_report import TuneOutcome, report_run
from .tune_resume import say_resume

if TYPE_CHECKING:
    from ..verification.verdict import Verdict


def run(args: TuneOptions) -> int:
    outcome = tune_study(args)
    verdict = verify_outcome(args, outcome)
    return outcome.exit_code if verdict is None else verdict.exit_code


def verify_outcome(args: TuneOptions, outcome: TuneOutcome) -> Verdict | None:
    """`--verify`: the best config's recipe trained beside the baseline's (commands/verify.py),
    its verdict printed and returned; None when not asked for, or when nothing was found."""
    if (
        not args.verify
        or outcome.exit_code != 0
        or outcome.study is None
        or outcome.problem is None
    ):
        return None
    from .verify import verify_tuned

    console = console_for(args)
    verdict = verify_tuned(args, console, outcome.study, outcome.problem)
    console.print(ui.indented(verdict.line(), 0))
    return verdict


def tune_study(args: TuneOptions) -> TuneOutcome:
    """The run; a Ctrl-C at any point, even while the model is traced in the first seconds,
    ends with the command that goes on (or starts again) from where it stopped."""
    opened: dict[str, Any] = {}  # the study, once it is open: the interrupt line counts its trials
    try:
        return _tune_study(args, opened)
    except KeyboardInterrupt:
        if not args.worker and say_resume(args, opened.get("study"), opened.get("problem")):
            raise Explained from None
        raise


def _tune_study(args: TuneOptions, opened: dict[str, Any]) -> TuneOutcome:
    console = console_for(args)
    search = steps.what_to_search(args, console)
    stored, search = steps.open_stored(args, search)
    measuring = measuring_backend(args, console, stored.out_dir / "trials")
    search = steps.with_numerics(args, search, stored, console)
    calibrated = steps.calibrated(stored, search.problem, measuring)
    guided = steps.guidance(args, search, measuring, calibrated)
    # with a calibration store's prior, a baseline it rules out is not compiled
    veto = (
        calibration.prior_veto(guided.guide, search.baseline) if calibrated is not None else None
    )
    backend = screened(args, measuring, veto)
    study, created = steps.open_study(args, search, stored, guided, backend)
    problem = search.problem
    opened.update(study=study, problem=problem)
    runner = Runner(
        study,
        problem,
        search.profile,
        search.space,
        backend,
        adjust=search.prepare,
        guide=guided.guide,
    )
    recorder = calibration.attach(calibrated, study, problem, search.profile, backend, warn)
    if recorder is not None:  # this study's compiles go to the calibration store
        runner.observers.append(recorder)
    view = _view(args, console, study, created, problem, backend, stored, calibrated)
    runner.observers.append(view)
    ran = _run_trials(args, console, study, runner, view, backend, args.jobs)
    if args.worker:  # the process that started it reports
        return TuneOutcome(130 if runner.stop_requested and len(ran) < args.trials else 0)
    return report_run(
        args,
        console,
        study,
        runner,
        ran,
        backend,
        problem,
        guided.guide,
        search.advice,
        stored.url,
        stored.name,
        stored.out_dir,
        calibrated,
    )


def _view(
    args: TuneOptions,
    console: Console,
    study: optuna.Study,
    created: bool,
    problem: Problem,
    backend: Backend,
    stored: steps.Stored,
    calibrated: calibration.Calibration | None,
) -> live_view.TuneView:
    """The live view of the trials, after the header (a resumed study's earlier trials and
    unreadable records first)."""
    earlier, unreadable = ([], {}) if created else st.read_records(study)
    quiet = args.quiet or args.json or args.worker
    view = live_view.TuneView(console, args.trials, quiet=quiet, earlier=earlier)
    if not quiet:
        print_header(console, problem, backend, stored.name, stored.url, created, study)
        if calibrated is not None and calibrated.note:
            console.print(f"[dim]{escape(terminal_text(calibrated.note))}[/]", highlight=False)
        print_unreadable(console, unreadable)
    return view


def _run_trials(
    args: TuneOptions,
    console: Console,
    study: optuna.Study,
    runner: Runner,
    view: live_view.TuneView,
    backend: Backend,
    jobs: int,
) -> list[TrialRecord]:
    """The trials of this run: in this process, or in --jobs worker processes watched from here."""

    def on_stop(signum: int) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        console.print(
            f"[yellow]{name}: stopping after the current trial (it gets "
            f"{runner.interrupt_grace_s:g} s to finish, else it is recorded as interrupted and "
            "run again on resume); press Ctrl-C again to quit now.[/]"
        )

    try:
        if jobs > 1:
            workers = parallel.Workers(WORKER_COMMAND, worker_inputs(args, jobs))
            try:
                with workers.pass_signals(on_stop), view:
                    ran = parallel.watch(study, workers, view, view.show_running)
            finally:
                workers.signal_all(
                    signal.SIGINT
                )  # only if this process failed: never leave a worker behind
                workers.wait()
            runner.stop_requested = workers.stops > 0
        else:
            with runner.stop_on_signals(on_stop), view:
                ran = runner.run(args.trials, args.timeout)
    finally:  # a second Ctrl-C leaves the storage consistent; tune_study says how to go on
        backend.close()
    return ran


#: how a --jobs worker is started (commands/tune_worker.py)
WORKER_COMMAND = [sys.executable, "-m", "ipu_autotune.commands.tune_worker"]


def worker_inputs(args: TuneOptions, jobs: int) -> list[bytes]:
    """What each --jobs worker reads on stdin: this run's options with its share of the
    trials, as a worker (no header, summary or files)."""
    return [
        pickle.dumps(replace(args, jobs=1, trials=n, worker=True, quiet=True, json=False))
        for n in parallel.shares(args.trials, jobs)
    ]
