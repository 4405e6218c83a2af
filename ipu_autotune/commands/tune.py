"""`ipu-autotune MODEL --batch-size N` (tune): problem → space → study → runner → report,
each step a call into the library. The steps' details live in the functions below it."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path

from optuna.trial import TrialState
from rich.console import Console
from rich.markup import escape

from ..args import problem_from_args, python_call, resume_command
from ..backends import resolve_backend_name
from ..backends.estimate.error_bars import kept_free
from ..errors import UsageError
from ..guide.nofit import EXIT_NOTHING_FITS, lacks
from ..guide.proposal import History
from ..guide.warmstart import is_baseline
from ..interrupt import Explained
from ..models.objects import is_object
from ..option_spec import flag_words
from ..options import DEFAULT_OUT, TuneOptions
from ..present import intervals, ui
from ..present.display import terminal_text
from ..present.outputs import compile_counts, lr_json, record_json, write_outputs
from ..present.tune_summary import print_header, print_summary, result_line
from ..problem import Problem, load_config_file
from ..rules.cross_field import validate
from ..search.space import SearchSpace
from ..study import parallel, records as st
from ..study.planning import NUMERIC_KNOBS, advised, warm_starts
from ..study.runner import Runner
from ..study.storage import check_url, mask_url, open_storage
from .common import (
    console_for,
    make_backend,
    numerics_advice,
    numerics_notes,
    print_unreadable,
    trace,
    with_host_data,
)


@dataclass
class TuneOutcome:
    """What a tune run leaves for its caller: the exit code, and for the Python API the study."""

    exit_code: int
    study: object = None
    problem: Problem | None = None
    study_name: str = ""
    backend: str = ""
    interrupted: bool = False
    files: dict = field(default_factory=dict)
    resume: str = ""


def run(args: TuneOptions) -> int:
    outcome = tune_study(args)
    verdict = verify_outcome(args, outcome)
    return outcome.exit_code if verdict is None else verdict.exit_code


def verify_outcome(args: TuneOptions, outcome: TuneOutcome):
    """`--verify`: the best config's recipe trained beside the baseline's (commands/verify.py), its
    verdict printed and returned; None when not asked for, or when the run found nothing to verify."""
    if not args.verify or outcome.exit_code != 0 or outcome.study is None or outcome.problem is None:
        return None
    from .verify import verify_tuned

    console = console_for(args)
    verdict = verify_tuned(args, console, outcome.study, outcome.problem)
    console.print(ui.indented(verdict.line(), 0))
    return verdict


def tune_study(args: TuneOptions) -> TuneOutcome:
    """The run; a Ctrl-C at any point, even while the model is traced in the first seconds,
    ends with the command that goes on (or starts again) from where it stopped."""
    opened: dict = {}  # the study, once it is open: the interrupt line counts its trials
    try:
        return _tune_study(args, opened)
    except KeyboardInterrupt:
        if not args.worker and _say_resume(args, opened.get("study"), opened.get("problem")):
            raise Explained from None
        raise


def _say_resume(args: TuneOptions, study, problem: Problem | None) -> bool:
    try:
        problem = problem or problem_from_args(args)
    except UsageError:  # interrupted before the command line was read whole: nothing to go on from
        return False
    name = args.study or problem.slug
    if study is None:
        said = f"Interrupted before any trial ran (study {name} not started).\nRun again with:\n  "
    else:
        done = sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        said = f"Interrupted: {done} completed trial(s) in study {name}.\nResume with:\n  "
    Console(stderr=True, highlight=False).print(said + _resume(args, problem, args.storage, name),
                                                soft_wrap=True, markup=False)
    return True


def _tune_study(args: TuneOptions, opened: dict) -> TuneOutcome:
    from ..guide.warmstart import naive_baseline, proposals

    console = console_for(args)
    if args.verify and not args.data:
        raise UsageError("tune --verify needs --data MODULE:FUNCTION: the data both recipes train on")
    # the problem, and the model's profile
    problem = with_host_data(args, problem_from_args(args), console)
    check_url(args.storage)  # a URL that cannot work fails before the model is traced
    from ..calibration import session as calibration

    calibration_url = calibration.store_url(args.storage, args.calibration_storage, args.no_calibration)
    baseline_file = _baseline_file(args, problem)
    profile = trace(problem, console)
    # the space it is searched in
    space = _space(args, problem, profile)
    baseline = baseline_file.config if baseline_file else naive_baseline(problem, profile)
    validate(problem, baseline, profile.module_order, where=args.baseline or "the default baseline")
    # the study: created or resumed
    storage_url = args.storage
    jobs = args.jobs
    parallel.check_jobs(jobs, storage_url)
    study_name = args.study or problem.slug
    out_dir = Path(args.out or Path(DEFAULT_OUT) / study_name)
    resolve_backend_name(args.backend)  # its error before the storage is touched
    storage = open_storage(storage_url, args.heartbeat)  # unreachable: one line, before any note
    existing = st.load_existing(storage, study_name)
    if existing is not None:
        problem = _resumable(args, existing, problem, study_name)
    backend = make_backend(args, problem, console, out_dir / "trials")
    seed = 0 if args.seed is None else args.seed  # the same advice on every run of the same command
    advice = None if args.no_numerics else numerics_advice(problem, space, existing, console, seed)
    prepare = None
    if advice is not None:
        space = space.without(*NUMERIC_KNOBS)
        prepare = advised(advice, space)
    calibrated = _calibration(calibration_url, existing, problem, backend)
    # the warm starts climb to the most of a tile a trial may use and still count as fitting
    headroom = kept_free(problem.model, args.headroom, args.fit_confidence) if backend.name == "estimate" \
        else args.headroom
    guide = warm = None
    if backend.name != "estimate":
        from ..guide.proposals import Guide

        # compiles: the guide ranks the later warm starts with what it learns, in every process
        # (a --jobs worker and a resumed study too, not only the one that creates it)
        warm = proposals(problem, profile, space, baseline, headroom=args.headroom, prepare=prepare)
        guide = Guide(problem, profile, space, args.headroom, prepare, candidates=[p.config for p in warm],
                      prior=calibrated.prior if calibrated is not None else None)
    if calibrated is not None and hasattr(backend, "veto"):  # ScreenedBackend: the prior screens too
        backend.veto = calibration.prior_veto(guide, baseline)

    def on_create(study) -> None:
        study.set_user_attr(st.ATTR_SPACE, space.to_dict())
        study.set_user_attr(calibration.ATTR_UID, calibration.new_uid())
        # the estimate backend's warm starts are plan's (study/planning.search): one search
        items = warm or warm_starts(problem, profile, space, baseline, headroom, prepare)
        if guide is not None:
            from ..guide.first_trials import first_trials
            from ..guide.proposals import COMPILED_WARM_STARTS

            # with other studies' compiles (a calibration store's prior), the guide's choice first
            items = first_trials(guide, items[:COMPILED_WARM_STARTS], lambda c: backend.would_compile(problem, c))
        st.enqueue(study, space, problem, profile, items)

    study, created = st.open_study(storage, study_name, problem, args.seed, on_create, args.heartbeat)
    opened.update(study=study, problem=problem)
    if advice is not None and st.ATTR_NUMERICS not in study.user_attrs:
        study.set_user_attr(st.ATTR_NUMERICS, advice.to_dict())
    # the runner: trials until the budget, a stop or a signal
    runner = Runner(study, problem, profile, space, backend, adjust=prepare, guide=guide)
    if calibration.attach(calibrated, study, problem, profile, backend, _warn) is not None:
        runner.observers.append(calibrated.recorder)
    earlier, unreadable = ([], {}) if created else st.read_records(study)
    view = ui.TuneView(console, args.trials, quiet=args.quiet or args.json or args.worker, earlier=earlier)
    runner.observers.append(view)
    if not args.quiet and not args.json and not args.worker:
        print_header(console, problem, backend, study_name, storage_url, created, study)
        if calibrated is not None and calibrated.note:
            console.print(f"[dim]{escape(terminal_text(calibrated.note))}[/]", highlight=False)
        print_unreadable(console, unreadable)
    ran = _run_trials(args, console, study, runner, view, backend, jobs)
    if args.worker:  # the process that started it reports
        return TuneOutcome(130 if runner.stop_requested and len(ran) < args.trials else 0)
    # the report
    return _report(args, console, study, runner, ran, backend, problem, guide, advice, storage_url, study_name,
                   out_dir, calibrated)


def _warn(line: str) -> None:
    Console(stderr=True, highlight=False).print(terminal_text(line), style="yellow", markup=False, soft_wrap=True)


def _calibration(url, existing, problem, backend):
    """The calibration store (docs/calibration.md), compiling backends only, with the guide's
    prior from other studies' records; a refused store is one warning line and the study
    runs uncorrected."""
    from ..calibration import session as calibration

    if url is None or backend.name == "estimate":
        return None
    store = calibration.open_for_tune(url, _warn)
    uid = calibration.study_uid(existing) if existing is not None else None
    return calibration.give_prior(store, uid, problem, backend, _warn)


def _baseline_file(args, problem: Problem):
    """--baseline FILE, read and checked against the command line's problem."""
    baseline_file = load_config_file(args.baseline) if args.baseline else None
    if baseline_file and baseline_file.problem and baseline_file.problem != problem:
        raise UsageError(f"{args.baseline}: its [problem] differs from the command line; "
                         "remove the [problem] table or match the flags")
    if baseline_file and baseline_file.config is None:
        raise UsageError(f"{args.baseline}: no [config] table")
    return baseline_file


def _space(args, problem: Problem, profile) -> SearchSpace:
    """The search space: --space (or the built-in one), narrowed by --micro-batch, checked."""
    space = SearchSpace.load(problem, args.space)
    if args.micro_batch is not None:
        space = space.with_knob("micro_batch", args.micro_batch, "--micro-batch")
    if not space.ipu_layouts(problem, profile):
        raise UsageError("no IPU layout fits the problem and the search space "
                         "(check --ipus, --global-batch and the space's ipus_per_replica/replicas)")
    st.check_space(space, problem, profile)  # a knob left without a valid value: before any storage
    return space


def _resumable(args, existing, problem: Problem, study_name: str) -> Problem:
    """The problem as the existing study has it, after checking this run may resume it."""
    problem = _stored_host_costs(existing, problem)
    st.check_same_problem(existing, problem)
    if args.baseline:  # warm starts are enqueued once, when a study is created
        raise UsageError(f"study '{study_name}' exists, so --baseline {args.baseline} would be ignored; "
                         "drop --baseline to resume it, or give --study NEW_NAME to start a new study "
                         "from this baseline")
    return problem


def _run_trials(args, console, study, runner, view, backend, jobs) -> list:
    """The trials of this run: in this process, or in --jobs worker processes watched from here."""
    def on_stop(signum) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        console.print(f"[yellow]{name}: stopping after the current trial (it gets {runner.interrupt_grace_s:g} s "
                      "to finish, else it is recorded as interrupted and run again on resume); "
                      "press Ctrl-C again to quit now.[/]")

    try:
        if jobs > 1:
            workers = parallel.Workers(list(args.argv), args.trials, jobs)
            try:
                with workers.pass_signals(on_stop), view:
                    ran = parallel.watch(study, workers, view, view.show_running)
            finally:
                workers.signal_all(signal.SIGINT)  # only if this process failed: never leave a worker behind
                workers.wait()
            runner.stop_requested = workers.stops > 0
        else:
            with runner.stop_on_signals(on_stop), view:
                ran = runner.run(args.trials, args.timeout)
    finally:  # a second Ctrl-C leaves the storage consistent; tune_study says how to go on
        backend.close()
    return ran


def _report(args, console, study, runner, ran, backend, problem, guide, advice, storage_url, study_name,
            out_dir, calibrated=None) -> TuneOutcome:
    """The files, then the summary (or JSON, or one line), then the exit code."""
    from ..host import pipeline as host_pipeline
    from ..present import host_report as host_report

    estimated = backend.name == "estimate"
    records = st.records(study)
    stop = None
    if guide is not None and records:  # the stopping rule, on every worker's compiles
        stop = guide.stopping(History.of([(r.config, r.measurement) for r in records],
                                         would_compile=runner.would_compile))
    best = st.best_record(study, skip_unreadable=True)
    closest = None if best else st.closest_record(records)
    base = next((r for r in records if is_baseline(r.origin)), records[0] if records else None)
    base_gb = host_pipeline.global_batch(problem, base.config) if base is not None else None
    try:
        files = write_outputs(out_dir, problem, study_name, records, best,
                              numerics_notes(advice, best.config) if best else [], base_gb)
    except ValueError as exc:  # the best's stored config would not be safe code (a crafted record)
        assert best is not None  # only the best's config is written as code
        console.print(terminal_text(f"best trial {best.number} is not exported: {exc}"), style="yellow",
                      markup=False, highlight=False, soft_wrap=True)
        files = write_outputs(out_dir, problem, study_name, records, None, [], base_gb)
    reference = host_report.workshop_reference(problem) if best is not None else None
    if args.out:  # an explicit output folder also gets the HTML report (a few MB, plotly inline)
        from ..report import write_report

        files["report"] = write_report(study, problem, out_dir / "report.html")
    finished = sum(1 for r in ran if r.measurement.failure != "interrupted")
    remaining = args.trials - finished if runner.stop_requested and finished < args.trials else None
    resume = _resume(args, problem, storage_url, study_name, remaining)
    helps = _nothing_fits_help(problem, args, best, closest)
    alternative = st.uncertain_alternative(records, best) if estimated else None
    alternative_line = "" if alternative is None or best is None else (
        intervals.alternative_line(best.measurement, alternative.number, alternative.measurement)
        + f"; its configuration: ipu-autotune show --study {study_name} --trial {alternative.number}")
    if args.json:
        print(json.dumps({
            "study": study_name, "storage": mask_url(storage_url), "backend": backend.name,
            "estimated": estimated, "trials_run": len(ran), "trials_total": len(records),
            "interrupted": runner.stop_requested,
            "baseline": record_json(base), "best": record_json(best),
            "closest": record_json(closest),
            "alternative": record_json(alternative),
            "closest_lacks": lacks(closest.measurement) if closest else None,
            "changes_that_help": [c.to_dict() for c in helps],
            "files": {k: str(v) for k, v in files.items()}, "resume": resume,
            "numerics": advice.to_dict() if advice is not None else None,
            "compiles": compile_counts(backend),
            "workshop_reference": reference.to_dict() if reference is not None else None,
            "learning_rate": lr_json(problem, base, best),
            "stopping_rule": str(stop) if stop is not None else None,
            "calibration": calibrated.to_json(study) if calibrated is not None else None,
        }, indent=2))
    elif args.quiet:
        console.print(result_line(best, base, study_name), soft_wrap=True, markup=False)
    else:
        print_summary(console, problem, base, best, closest, files, resume, estimated,
                      len(ran), runner.stop_requested, advice, compile_counts(backend), reference, helps,
                      alternative_line)
        if stop is not None:
            console.print(f"Stopping rule: {stop}.", highlight=False)
    interrupted = runner.stop_requested and len(ran) < args.trials
    code = 130 if interrupted else EXIT_NOTHING_FITS if best is None and records else 0
    return TuneOutcome(code, study, problem, study_name, backend.name, interrupted, files, resume)


def _nothing_fits_help(problem: Problem, args, best, closest) -> list:
    """When nothing fits: the changes to the command line that would help the closest trial most
    (estimated, under the same error bar as an estimated trial)."""
    if best is not None or closest is None:
        return []
    from ..study.plan_advice import best_changes

    return best_changes(problem, closest.config, args.headroom, closest.measurement, args.fit_confidence)


def _stored_host_costs(study, problem: Problem) -> Problem:
    """A resumed study keeps the host costs it was created with (a new timing differs a little)."""
    from dataclasses import replace

    stored = st.stored_problem(study)
    if stored is None:
        return problem
    return replace(problem, host_float_sample_s=stored.host_float_sample_s,
                   host_uint8_sample_s=stored.host_uint8_sample_s, host_worker_speedups=stored.host_worker_speedups)
def _resume(args: TuneOptions, problem: Problem, storage_url: str, study_name: str, trials: int | None = None) -> str:
    """The command that goes on with this study as this run did (the storage password masked)."""
    import shlex

    extra = [] if trials is None else ["--trials", str(trials)]
    extra += flag_words(args, ("space", "micro_batch", "backend", "headroom", "fit_confidence", "no_numerics",
                               "no_screen", "no_calibration"))
    if args.calibration_storage and not args.no_calibration:
        extra += ["--calibration-storage", mask_url(args.calibration_storage)]
    extra += flag_words(args, ("out",))
    command = resume_command(problem, storage_url, study_name) + ("" if not extra else " " + shlex.join(extra))
    return python_call(command) if is_object(problem.model) else command
