"""`ipu-autotune MODEL --batch-size N` (tune): problem → space → study → runner → report,
each step a call into the library. The steps' details live in the functions below it."""

from __future__ import annotations

import json
import pickle
import signal
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.markup import escape

from ..backends.base import Backend
from ..calibration import session as calibration
from ..errors import UsageError
from ..guide.nofit import EXIT_NOTHING_FITS, lacks
from ..guide.proposal import History
from ..guide.warmstart import is_baseline
from ..interrupt import Explained
from ..models.objects import is_object
from ..options import TuneOptions
from ..options.problem_flags import (
    changed_options,
    command_line,
    problem_from_options,
    python_call,
    resume_keywords,
)
from ..present import intervals, ui
from ..present.display import terminal_text
from ..present.outputs import compile_counts, lr_json, record_json, write_outputs
from ..present.tune_summary import print_header, print_summary, result_line
from ..problem import Problem
from ..study import parallel, records as st
from ..study.records import TrialRecord
from ..study.runner import Runner
from ..study.storage import mask_url
from . import tune_steps as steps
from .common import (
    console_for,
    measuring_backend,
    numerics_notes,
    print_unreadable,
    screened,
    warn,
)

if TYPE_CHECKING:
    from ..guide.guide import Guide
    from ..guide.nofit import Change
    from ..numerics.answer import NumericsAdvice
    from ..verification.verdict import Verdict


@dataclass
class TuneOutcome:
    """What a tune run leaves for its caller: the exit code, and for the Python API the study."""

    exit_code: int
    study: optuna.Study | None = None
    problem: Problem | None = None
    study_name: str = ""
    backend: str = ""
    interrupted: bool = False
    files: dict[str, Path] = field(default_factory=dict)
    resume: str = ""


def run(args: TuneOptions) -> int:
    outcome = tune_study(args)
    verdict = verify_outcome(args, outcome)
    return outcome.exit_code if verdict is None else verdict.exit_code


def verify_outcome(args: TuneOptions, outcome: TuneOutcome) -> Verdict | None:
    """`--verify`: the best config's recipe trained beside the baseline's (commands/verify.py), its
    verdict printed and returned; None when not asked for, or when the run found nothing to
    verify."""
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
        if not args.worker and _say_resume(args, opened.get("study"), opened.get("problem")):
            raise Explained from None
        raise


def _say_resume(args: TuneOptions, study: optuna.Study | None, problem: Problem | None) -> bool:
    try:
        problem = problem or problem_from_options(args)
    except UsageError:  # interrupted before the command line was read whole: nothing to go on from
        return False
    name = args.study or problem.slug
    if study is None:
        said = f"Interrupted before any trial ran (study {name} not started).\nRun again with:\n  "
    else:
        done = sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        said = f"Interrupted: {done} completed trial(s) in study {name}.\nResume with:\n  "
    Console(stderr=True, highlight=False).print(
        said + _resume(args, problem, args.storage, name), soft_wrap=True, markup=False
    )
    return True


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
    return _report(
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
) -> ui.TuneView:
    """The live view of the trials, after the header (a resumed study's earlier trials and
    unreadable records first)."""
    earlier, unreadable = ([], {}) if created else st.read_records(study)
    quiet = args.quiet or args.json or args.worker
    view = ui.TuneView(console, args.trials, quiet=quiet, earlier=earlier)
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
    view: ui.TuneView,
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


def _report(
    args: TuneOptions,
    console: Console,
    study: optuna.Study,
    runner: Runner,
    ran: list[TrialRecord],
    backend: Backend,
    problem: Problem,
    guide: Guide | None,
    advice: NumericsAdvice | None,
    storage_url: str,
    study_name: str,
    out_dir: Path,
    calibrated: calibration.Calibration | None = None,
) -> TuneOutcome:
    """The files, then the summary (or JSON, or one line), then the exit code."""
    from ..host import pipeline as host_pipeline
    from ..present import host_report as host_report

    estimated = backend.name == "estimate"
    records = st.records(study)
    stop = None
    if guide is not None and records:  # the stopping rule, on every worker's compiles
        stop = guide.stopping(
            History.of(
                [(r.config, r.measurement) for r in records], would_compile=runner.would_compile
            )
        )
    best = st.best_record(study, skip_unreadable=True)
    closest = None if best else st.closest_record(records)
    base = next((r for r in records if is_baseline(r.origin)), records[0] if records else None)
    base_gb = host_pipeline.global_batch(problem, base.config) if base is not None else None
    try:
        files = write_outputs(
            out_dir,
            problem,
            study_name,
            records,
            best,
            numerics_notes(advice, best.config) if best else [],
            base_gb,
        )
    except ValueError as exc:  # the best's stored config would not be safe code (a crafted record)
        assert best is not None  # only the best's config is written as code
        console.print(
            terminal_text(f"best trial {best.number} is not exported: {exc}"),
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        files = write_outputs(out_dir, problem, study_name, records, None, [], base_gb)
    reference = host_report.workshop_reference(problem) if best is not None else None
    if args.out:  # an explicit output folder also gets the HTML report (a few MB, plotly inline)
        from ..report import write_report

        files["report"] = write_report(study, problem, out_dir / "report.html")
    finished = sum(1 for r in ran if r.measurement.failure != "interrupted")
    remaining = (
        args.trials - finished if runner.stop_requested and finished < args.trials else None
    )
    resume = _resume(args, problem, storage_url, study_name, remaining)
    helps = _nothing_fits_help(problem, args, best, closest)
    alternative = st.uncertain_alternative(records, best) if estimated else None
    alternative_line = (
        ""
        if alternative is None or best is None
        else (
            intervals.alternative_line(
                best.measurement, alternative.number, alternative.measurement
            )
            + f"; its configuration: ipu-autotune show --study {study_name} --trial "
            f"{alternative.number}"
        )
    )
    if args.json:
        print(
            json.dumps(
                {
                    "study": study_name,
                    "storage": mask_url(storage_url),
                    "backend": backend.name,
                    "estimated": estimated,
                    "trials_run": len(ran),
                    "trials_total": len(records),
                    "interrupted": runner.stop_requested,
                    "baseline": record_json(base),
                    "best": record_json(best),
                    "closest": record_json(closest),
                    "alternative": record_json(alternative),
                    "closest_lacks": lacks(closest.measurement) if closest else None,
                    "changes_that_help": [c.to_dict() for c in helps],
                    "files": {k: str(v) for k, v in files.items()},
                    "resume": resume,
                    "numerics": advice.to_dict() if advice is not None else None,
                    "compiles": compile_counts(backend),
                    "workshop_reference": reference.to_dict() if reference is not None else None,
                    "learning_rate": lr_json(problem, base, best),
                    "stopping_rule": str(stop) if stop is not None else None,
                    "calibration": calibrated.to_json(study) if calibrated is not None else None,
                },
                indent=2,
            )
        )
    elif args.quiet:
        console.print(result_line(best, base, study_name), soft_wrap=True, markup=False)
    else:
        print_summary(
            console,
            problem,
            base,
            best,
            closest,
            files,
            resume,
            estimated,
            len(ran),
            runner.stop_requested,
            advice,
            compile_counts(backend),
            reference,
            helps,
            alternative_line,
        )
        if stop is not None:
            console.print(f"Stopping rule: {stop}.", highlight=False)
    interrupted = runner.stop_requested and len(ran) < args.trials
    code = 130 if interrupted else EXIT_NOTHING_FITS if best is None and records else 0
    return TuneOutcome(code, study, problem, study_name, backend.name, interrupted, files, resume)


def _nothing_fits_help(
    problem: Problem, args: TuneOptions, best: TrialRecord | None, closest: TrialRecord | None
) -> list[Change]:
    """When nothing fits: the changes to the command line that would help the closest trial most
    (estimated, under the same error bar as an estimated trial)."""
    if best is not None or closest is None:
        return []
    from ..study.plan_advice import best_changes

    return best_changes(
        problem, closest.config, args.headroom, closest.measurement, args.fit_confidence
    )


#: how a --jobs worker is started (commands/tune_worker.py)
WORKER_COMMAND = [sys.executable, "-m", "ipu_autotune.commands.tune_worker"]


def worker_inputs(args: TuneOptions, jobs: int) -> list[bytes]:
    """What each --jobs worker reads on stdin: this run's options with its share of the
    trials, as a worker (no header, summary or files)."""
    return [
        pickle.dumps(replace(args, jobs=1, trials=n, worker=True, quiet=True, json=False))
        for n in parallel.shares(args.trials, jobs)
    ]


def _resume(
    args: TuneOptions,
    problem: Problem,
    storage_url: str,
    study_name: str,
    trials: int | None = None,
) -> str:
    """The command that goes on with this study as this run did (the storage password masked);
    for a model object, the Python call."""
    keywords = resume_keywords(problem, storage_url, study_name)
    if trials is not None:
        keywords["trials"] = trials
    keywords.update(
        changed_options(
            args,
            (
                "space",
                "micro_batch",
                "backend",
                "headroom",
                "fit_confidence",
                "no_numerics",
                "no_screen",
                "no_calibration",
            ),
        )
    )
    if args.calibration_storage and not args.no_calibration:
        keywords["calibration_storage"] = mask_url(args.calibration_storage)
    keywords.update(changed_options(args, ("out",)))
    if is_object(problem.model):
        return python_call(problem.model, keywords)
    return command_line(problem.model, keywords)
