"""What each subcommand does, given parsed arguments. Output goes through `ui`."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import export, parallel, ui
from .backends import resolve_backend_name
from .backends.base import Backend, Measurement
from .args import DEFAULT_OUT, problem_from_args, resume_command
from .errors import UsageError
from .models.trace import profile_for
from .models.zoo import check_model_name
from .nofit import EXIT_NOTHING_FITS, lacks
from .problem import Config, Problem, load_config_file
from .rules import validate
from .search.space import SearchSpace
from .storage import check_url, mask_url, open_storage


def _console(args) -> Console:
    # JSON goes to stdout alone; everything human goes to stderr then.
    return Console(stderr=bool(getattr(args, "json", False)), highlight=False)


def _trace(problem: Problem, console: Console):
    check_model_name(problem.model)
    with console.status(f"Tracing {problem.model} on the meta device (no weights, no memory)…"):
        try:
            return profile_for(problem)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"model '{problem.model}' could not be traced with input "
                             f"{list(problem.inputs) or list(problem.input_shape)} at micro-batch "
                             f"{problem.batch_size}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
                             + ("check --input (NAME:SHAPE:DTYPE, one per forward argument)"
                                if problem.inputs or problem.token_inputs else
                                "check --input-shape, or describe several or integer inputs with --input")) from None


def make_backend(args, problem: Problem, console: Console, work_dir: Path | None = None) -> Backend:
    from .backends.estimate import EstimateBackend

    name = resolve_backend_name(args.backend)
    if name == "estimate":
        if args.backend == "auto" and not getattr(args, "quiet", False):
            Console(stderr=True).print("[dim]PopTorch not found: using the estimate backend; "
                                       "every figure is estimated.[/]")
        return EstimateBackend(headroom=args.headroom)
    from .backends.poptorch import PopTorchBackend
    from .backends.screen import ScreenedBackend

    backend = PopTorchBackend(work_dir=work_dir or Path(DEFAULT_OUT), timeout_s=args.compile_timeout)
    # Without screening the estimator still fills in throughput where an offline compile has none.
    margin = float("inf") if getattr(args, "no_screen", False) else args.screen_margin
    return ScreenedBackend(backend, EstimateBackend(headroom=args.headroom), margin=margin)


# --- tune ---------------------------------------------------------------------------------------

def cmd_tune(args) -> int:
    from . import parallel, study as st
    from .warmstart import naive_baseline, proposals

    console = _console(args)
    problem = _with_host_data(args, problem_from_args(args), console)
    check_url(args.storage)  # a URL that cannot work fails before the model is traced
    baseline_file = load_config_file(args.baseline) if args.baseline else None
    if baseline_file and baseline_file.problem and baseline_file.problem != problem:
        raise UsageError(f"{args.baseline}: its [problem] differs from the command line; "
                         "remove the [problem] table or match the flags")
    if baseline_file and baseline_file.config is None:
        raise UsageError(f"{args.baseline}: no [config] table")

    profile = _trace(problem, console)
    space = SearchSpace.load(problem, args.space)
    if args.micro_batch is not None:
        space = space.with_knob("micro_batch", args.micro_batch, "--micro-batch")
    if not space.ipu_layouts(problem, profile):
        raise UsageError("no IPU layout fits the problem and the search space "
                         "(check --ipus, --global-batch and the space's ipus_per_replica/replicas)")
    st.check_space(space, problem, profile)  # a knob left without a valid value: before any storage
    baseline = baseline_file.config if baseline_file else naive_baseline(problem, profile)
    validate(problem, baseline, profile.module_order, where=args.baseline or "the default baseline")

    storage_url = args.storage
    jobs = getattr(args, "jobs", 1)
    parallel.check_jobs(jobs, storage_url)
    study_name = args.study or problem.slug
    out_dir = Path(args.out or Path(DEFAULT_OUT) / study_name)
    resolve_backend_name(args.backend)  # its error before the storage is touched
    storage = open_storage(storage_url, args.heartbeat)  # unreachable: one line, before any note
    existing = st.load_existing(storage, study_name)
    if existing is not None:
        problem = _stored_host_costs(existing, problem)
        st.check_same_problem(existing, problem)
        if args.baseline:  # warm starts are enqueued once, when a study is created
            raise UsageError(f"study '{study_name}' exists, so --baseline {args.baseline} would be ignored; "
                             "drop --baseline to resume it, or give --study NEW_NAME to start a new study "
                             "from this baseline")
    backend = make_backend(args, problem, console, out_dir / "trials")
    estimated = backend.name == "estimate"
    seed = 0 if args.seed is None else args.seed  # the same advice on every run of the same command
    advice = None if args.no_numerics else _numerics_advice(problem, space, existing, console, seed)
    prepare = None
    if advice is not None:
        space = space.without(*NUMERIC_KNOBS)
        prepare = _advised(advice, space)

    guide = None
    if not estimated:
        from .guide import Guide

        guide = Guide(problem, profile, space, args.headroom, prepare)

    def on_create(study) -> None:
        study.set_user_attr(st.ATTR_SPACE, space.to_dict())
        items = proposals(problem, profile, space, baseline, headroom=args.headroom, prepare=prepare)
        if guide is not None:  # compiles: the guide ranks the later warm starts with what it learns
            from .guide import COMPILED_WARM_STARTS

            guide.pool.update(p.config for p in items)
            items = items[:COMPILED_WARM_STARTS]
        st.enqueue(study, space, problem, profile, items)

    study, created = st.open_study(storage, study_name, problem, args.seed, on_create, args.heartbeat)
    if advice is not None and st.ATTR_NUMERICS not in study.user_attrs:
        study.set_user_attr(st.ATTR_NUMERICS, advice.to_dict())
    runner = st.Runner(study, problem, profile, space, backend, adjust=prepare, guide=guide)
    earlier = [] if created else st.records(study)
    view = ui.TuneView(console, args.trials, quiet=args.quiet or args.json or args.worker, earlier=earlier)
    runner.observers.append(view)

    if not args.quiet and not args.json and not args.worker:
        _print_header(console, problem, backend, study_name, storage_url, created, study)

    def on_stop(signum) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        console.print(f"[yellow]{name}: stopping after the current trial (it gets {runner.interrupt_grace_s:g} s "
                      "to finish, else it is recorded as interrupted and run again on resume); "
                      "press Ctrl-C again to quit now.[/]")

    try:
        if jobs > 1:
            workers = parallel.Workers(args.argv, args.trials, jobs)
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
    except KeyboardInterrupt:  # the second Ctrl-C: the storage is consistent, say how to go on
        done = sum(1 for t in study.get_trials(deepcopy=False, states=(st.TrialState.COMPLETE,)))
        Console(stderr=True, highlight=False).print(
            f"Interrupted: {done} completed trial(s) in study {study_name}. Resume with:\n  "
            + _resume(args, problem, storage_url, study_name), soft_wrap=True, markup=False)
        raise
    finally:
        backend.close()
    if args.worker:  # the process that started it reports
        return 130 if runner.stop_requested and len(ran) < args.trials else 0

    records = st.records(study)
    if guide is not None and records:  # the stopping rule, on every worker's compiles
        guide.propose([(r.config, r.measurement) for r in records], {r.config for r in records})
    best = st.best_record(study)
    closest = None if best else st.closest_record(records)
    base = next((r for r in records if r.origin.startswith("baseline")), records[0] if records else None)
    from .host import pipeline as host_pipeline, report as host_report

    base_gb = host_pipeline.global_batch(problem, base.config) if base is not None else None
    files = _write_outputs(out_dir, problem, study_name, records, best,
                           _notes(advice, best.config) if best else [], base_gb)
    reference = host_report.workshop_reference(problem) if best is not None else None
    if args.out:  # an explicit output folder also gets the HTML report (a few MB, plotly inline)
        from .report import write_report

        files["report"] = write_report(study, problem, out_dir / "report.html")
    finished = sum(1 for r in ran if r.measurement.failure != "interrupted")
    remaining = args.trials - finished if runner.stop_requested and finished < args.trials else None
    resume = _resume(args, problem, storage_url, study_name, remaining)
    helps = []
    if best is None and closest is not None:
        from .nofit import best_changes

        helps = best_changes(problem, closest.config, profile, args.headroom)
    result = {
        "study": study_name, "storage": mask_url(storage_url), "backend": backend.name,
        "estimated": estimated, "trials_run": len(ran), "trials_total": len(records),
        "interrupted": runner.stop_requested,
        "baseline": _record_json(base), "best": _record_json(best),
        "closest": _record_json(closest),
        "closest_lacks": lacks(closest.measurement) if closest else None,
        "changes_that_help": [c.to_dict() for c in helps],
        "files": {k: str(v) for k, v in files.items()}, "resume": resume,
        "numerics": advice.to_dict() if advice is not None else None,
        "compiles": _compile_counts(backend),
        "workshop_reference": reference.to_dict() if reference is not None else None,
        "learning_rate": _lr_json(problem, base, best),
        "stopping_rule": guide.stop_note if guide is not None and guide.stop_note else None,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.quiet:
        console.print(_one_line(best, base, study_name), soft_wrap=True, markup=False)
    else:
        _print_summary(console, problem, base, best, closest, files, resume, estimated,
                       len(ran), runner.stop_requested, advice, _compile_counts(backend), reference, helps)
        if guide is not None and guide.stop_note:
            console.print(f"Stopping rule: {guide.stop_note}.", highlight=False)
    if runner.stop_requested and len(ran) < args.trials:
        return 130
    return EXIT_NOTHING_FITS if best is None and records else 0


def _with_host_data(args, problem: Problem, console) -> Problem:
    """The problem with its host costs timed from --data (a few seconds on this CPU)."""
    if not getattr(args, "data", None):
        return problem
    from dataclasses import replace

    from .host.measure import DEFAULT_SECONDS, measure

    with console.status(f"Timing the host input pipeline of --data {args.data} for {DEFAULT_SECONDS:g} s…") as status:
        measured = measure(args.data, progress=lambda n, t: status.update(
            f"Timing the host input pipeline of --data {args.data}: {n:,} samples in {t:.1f} s…"))
    if not getattr(args, "quiet", False):
        console.print(f"[dim]{measured.line()}[/]", highlight=False)
    return replace(problem, host_float_sample_s=measured.float_sample_s, host_uint8_sample_s=measured.uint8_sample_s)


def _stored_host_costs(study, problem: Problem) -> Problem:
    """A resumed study keeps the host costs it was created with (a new timing differs a little)."""
    from dataclasses import replace

    from .study import stored_problem

    stored = stored_problem(study)
    if stored is None:
        return problem
    return replace(problem, host_float_sample_s=stored.host_float_sample_s,
                   host_uint8_sample_s=stored.host_uint8_sample_s)


def _resume(args, problem: Problem, storage_url: str, study_name: str, trials: int | None = None) -> str:
    """The command that goes on with this study as this run did (the storage password masked)."""
    import shlex

    from .args import DEFAULT_HEADROOM

    extra: list[str] = []
    if trials is not None:
        extra += ["--trials", str(trials)]
    if args.space:
        extra += ["--space", args.space]
    if args.micro_batch is not None:
        mb = args.micro_batch
        extra += ["--micro-batch", mb if isinstance(mb, str) else f"{mb['low']}-{mb['high']}"]
    if args.backend != "auto":
        extra += ["--backend", args.backend]
    if args.headroom != DEFAULT_HEADROOM:
        extra += ["--headroom", str(args.headroom)]
    if args.no_numerics:
        extra.append("--no-numerics")
    if args.no_screen:
        extra.append("--no-screen")
    if args.out:
        extra += ["--out", args.out]
    return resume_command(problem, storage_url, study_name) + ("" if not extra else " " + shlex.join(extra))


def _lr_json(problem: Problem, base, best) -> dict | None:
    from .host.report import learning_rate

    if best is None:
        return None
    lr = learning_rate(problem, base.config if base is not None else None, best.config)
    if lr is None:
        return None
    return {"optimizer": lr.optimizer, "rule": lr.rule, "base_lr": lr.base_lr,
            "base_global_batch": lr.base_global_batch, "global_batch": lr.global_batch, "lr": lr.lr}


def _compile_counts(backend) -> dict | None:
    """How many candidates were compiled and how many the estimator screened out (this run)."""
    if not hasattr(backend, "compiles_saved"):
        return None
    return {"run": backend.compiles_run, "saved": backend.compiles_saved}


def _record_json(r) -> dict | None:
    if r is None:
        return None
    return {"trial": r.number, "origin": r.origin, "state": r.state, "config": r.config.to_dict(),
            "measurement": r.measurement.to_dict()}


def _one_line(best, base, study_name: str) -> str:
    if best is None:
        return f"{study_name}: nothing fits yet"
    m = best.measurement
    speed = f"{m.throughput:,.0f} samples/s" if m.throughput else "no throughput"
    ratio = f" ({ui.speedup_line(base, best)})" if base and base.measurement.throughput else ""
    return f"{study_name}: best trial {best.number} fits, {speed} [{m.source}]{ratio}"


def _print_header(console, problem: Problem, backend, study_name, storage_url, created, study) -> None:
    shape = "x".join(map(str, problem.input_shape))
    if problem.task:
        shape = f"{problem.task}, {problem.seq_len} tokens"
    elif problem.inputs:
        shape = ", ".join(problem.inputs)
    gb = f", global batch {problem.global_batch}" if problem.global_batch else ""
    where = "new study" if created else _resume_point(study)
    note = " (every figure estimated)" if backend.name == "estimate" else ""
    console.print(ui.panel(Text.assemble(
        (f"{problem.model}", "bold"), f"  micro-batch {problem.batch_size}, {shape}, {problem.optimizer}{gb}\n",
        f"{problem.ipus} x {problem.target.upper()} IPU   backend {backend.describe()}{note}\n",
        f"study {study_name} in {mask_url(storage_url)}\n{where}"), "ipu-autotune"))


def _resume_point(study) -> str:
    """'resuming: 12 trials done, next is trial 11': an interrupted trial waits to run again
    under a new number, and waiting trials run first, lowest number first."""
    from .study import TrialState

    trials = study.get_trials(deepcopy=False)
    done = sum(1 for t in trials if t.state.is_finished())
    waiting = [t.number for t in trials if t.state == TrialState.WAITING]
    nxt = min(waiting) if waiting else len(trials)
    return f"resuming: {done} trial(s) done, next is trial {nxt}"


def _print_summary(console, problem, base, best, closest, files, resume, estimated, ran, interrupted,
                   advice=None, compiles=None, reference=None, helps=()) -> None:
    console.print()
    if best is None:
        console.print("[bold red]Nothing fits yet.[/]")
        if closest is not None:
            knobs = ui.tl.changed_knobs(base.config if base else None, closest.config)
            console.print(ui.indented(f"Closest: trial {closest.number} ({knobs})", 0), highlight=False)
            console.print(ui.indented(f"it lacks memory: {lacks(closest.measurement)}"), highlight=False)
            console.print(ui.measurement_table(closest.measurement, "where the memory goes"))
        if helps:
            console.print("[bold]What would help most[/] (run again with):")
            for change in helps:
                console.print(ui.indented(f"{change.flag}: {change.result}"), highlight=False)
    else:
        console.print(ui.comparison(problem, base, best, estimated))
        lines = ui.changes(base.config, best.config)
        if lines:
            console.print("[bold]What changed[/] (baseline → best):")
            for line in lines:
                console.print(ui.indented(line), highlight=False)
        speed = ui.speedup_line(base, best)
        if speed:
            console.print(f"[bold green]{speed}[/]" + (" (both estimated)" if estimated else ""))
        from .host.report import lines as end_to_end_lines

        for line in end_to_end_lines(problem, base, best, reference):
            console.print(f"  {line}", highlight=False)
    if advice is not None:
        from .numerics import summary_lines

        console.print("[bold]Numerics[/] (from the model's own gradients, measured on the CPU):")
        for line in summary_lines(advice):
            console.print(ui.indented(line), highlight=False)
    console.print()
    if interrupted:
        console.print(f"[yellow]Interrupted after {ran} new trial(s).[/]")
    if compiles:
        console.print(f"Compiles this run: {compiles['run']}; screened out by the estimator, not compiled: "
                      f"{compiles['saved']}", highlight=False)
    for label, path in files.items():
        console.print(f"{label:>8}: {path}", highlight=False)
    console.print(f"  resume: {resume}", highlight=False, soft_wrap=True)


def _write_outputs(out_dir: Path, problem: Problem, study_name: str, records, best,
                   notes: list[str], base_global_batch: int | None = None) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    log = out_dir / "trials.jsonl"
    with log.open("w") as fh:
        for r in records:
            fh.write(json.dumps(_record_json(r)) + "\n")
    files["trials"] = log
    if best is not None:
        for fmt, name in (("toml", "best.toml"), ("python", "best_options.py")):
            path = out_dir / name
            path.write_text(export.render(fmt, problem, best.config, best.measurement, best.number, study_name,
                                          notes, base_global_batch))
            files["config" if fmt == "toml" else "snippet"] = path
        if problem.token_inputs:  # optimum-graphcore users load this with IPUConfig.from_pretrained
            from .export.ipu_config import render_ipu_config

            path = out_dir / "ipu_config.json"
            path.write_text(render_ipu_config(problem, best.config, profile_for(problem))[0])
            files["optimum"] = path
    return files


# --- numerics -------------------------------------------------------------------------------------

NUMERIC_KNOBS = ("loss_scaling", "stochastic_rounding", "partials")


def _numerics_advice(problem: Problem, space: SearchSpace, existing, console, seed: int = 0):
    """The study's numerics advice: stored with it, or measured now (a few seconds on the CPU)."""
    from . import numerics
    from .study import ATTR_NUMERICS

    stored = existing.user_attrs.get(ATTR_NUMERICS) if existing is not None else None
    if stored:
        return numerics.NumericsAdvice.from_dict(stored)
    precision = space.knobs["precision"]
    if all(v == "32.32" for v in getattr(precision, "values", ())):
        return None  # nothing runs in FP16: nothing to advise
    if problem.inputs or problem.token_inputs:
        return None  # the CPU statistics run feeds one float batch: these knobs are searched instead
    with console.status("Measuring gradient statistics on the CPU for loss scaling, stochastic rounding "
                        "and partials…"):
        try:
            return numerics.advise(problem, seed=seed)
        except UsageError:
            raise
        except Exception as exc:  # advice is an aid: without it the study still searches these knobs
            console.print(f"[yellow]numerics advice skipped: {type(exc).__name__}: {exc}[/]")
            return None


def _advised(advice, space: SearchSpace):
    """Apply the advice to a config, except where the user's space fixed a knob."""
    def prepare(config: Config) -> Config:
        advised = advice.apply(config)
        kept = {k: getattr(config, k) for k in NUMERIC_KNOBS if k in space.user_knobs}
        return advised.replace(**kept) if kept else advised
    return prepare


def _notes(advice, config: Config) -> list[str]:
    """The advice as it applies to the exported config (export/notes.py)."""
    from .export.notes import numerics_notes

    return numerics_notes(advice, config)


# --- estimate -------------------------------------------------------------------------------------

_WORD_KEYS = ("precision", "partials", "optimizer_state", "execution", "recompute")


def _parse_set(items: list[str]) -> dict:
    import tomllib

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: write KEY=VALUE, e.g. --set precision=16.16")
        key, value = key.strip(), value.strip()
        if key in _WORD_KEYS or value == "auto":
            out[key] = value.strip("\"'")  # 16.16 is a precision name here, not a number
            continue
        if key in ("splits", "checkpoints") and not value.startswith("["):
            out[key] = [p for p in value.split(",") if p]
            continue
        if key == "available_memory_proportion" and "," in value and not value.strip().startswith("["):
            value = f"[{value}]"
        try:
            out[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = value  # a bare word such as 16.16 or pipelined
    return out


def cmd_estimate(args) -> int:
    from .warmstart import naive_baseline

    console = _console(args)
    file = load_config_file(args.config) if args.config else None
    problem = _with_host_data(args, problem_from_args(args, file.problem if file else None), console)
    profile = _trace(problem, console)
    values = file.config.to_dict() if file and file.config else naive_baseline(problem, profile).to_dict()
    overrides = _parse_set(args.set)
    if "ipus_per_replica" in overrides and "available_memory_proportion" not in overrides:
        values.pop("available_memory_proportion", None)
    values.update(overrides)
    # The file's [config] was checked when it was read: a bad key or value now came from --set.
    config = Config.from_dict(values, "--set" if overrides else "config")
    where = " with ".join(filter(None, (args.config, "--set" if overrides else None))) or "config"
    validate(problem, config, profile.module_order, where=where)
    backend = make_backend(args, problem, console)
    m = backend.measure(problem, config)
    if args.json:
        out = m.to_dict()
        out["problem"] = problem.to_dict()
        out["config"] = config.to_dict()
        print(json.dumps(out, indent=2))
        return 0
    _print_measurement(console, problem, config, m)
    return 0


def _print_measurement(console, problem: Problem, config: Config, m: Measurement) -> None:
    from .advice import suggestions

    label = "estimated" if m.source == "estimate" else m.source
    console.print(ui.measurement_table(m, f"{problem.model}: memory per IPU ({label})"))
    verdict = Text(m.verdict(), style="green" if m.feasible else "red")
    console.print(Text.assemble("verdict: ", verdict))
    if m.throughput:
        console.print(f"throughput: {m.throughput:,.0f} samples/s, step {m.step_time_s * 1e3:.1f} ms ({label})",
                      highlight=False)
    if m.bottleneck:
        from .host.pipeline import bottleneck_line

        device = f"; the IPUs alone {m.device_throughput:,.0f}/s" if m.device_throughput else ""
        console.print(f"end to end: bottleneck {bottleneck_line(m)}{device}; {m.samples_per_call:,} samples "
                      f"({ui.format_bytes(m.host_bytes_per_call)}) per call ({label})", highlight=False)
    worst = m.worst_ipu()
    if worst is not None and m.breakdown:
        bd = m.breakdown[worst]
        top = max(bd, key=bd.get)
        console.print(f"largest consumer: {top} on IPU{worst} ({ui.format_bytes(bd[top])})")
    if m.source == "estimate":
        tips = suggestions(problem, config)
        if tips:
            console.print("[bold]Suggestions[/] (estimated):")
            for tip in tips[:5]:
                console.print(ui.indented(tip), highlight=False)


# --- export, show, studies ----------------------------------------------------------------------------

def _load_study(storage_url: str, name: str):
    import optuna

    from .study import stored_problem

    storage = open_storage(storage_url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        hint = f"; studies there: {', '.join(names[:8])}" if names else "; that storage holds no studies"
        raise UsageError(f"no study '{name}' in {mask_url(storage_url)}{hint}") from None
    problem = stored_problem(study)
    if problem is None:
        raise UsageError(f"study '{name}' was not made by ipu-autotune")
    return study, problem


def cmd_export(args) -> int:
    from .study import TrialRecord, best_record

    study, problem = _load_study(args.storage, args.study)
    if args.trial is None:
        record = best_record(study)
        if record is None:
            raise UsageError(f"study '{args.study}' has no configuration that fits yet; "
                             "export one anyway with --trial N")
    else:
        match = [t for t in study.trials if t.number == args.trial]
        record = TrialRecord.from_trial(match[0]) if match else None
        if record is None:
            raise UsageError(f"study '{args.study}' has no finished trial {args.trial}")
    from .numerics import NumericsAdvice
    from .study import ATTR_NUMERICS

    stored = study.user_attrs.get(ATTR_NUMERICS)
    try:
        notes = _notes(NumericsAdvice.from_dict(stored), record.config) if stored else []
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UsageError(f"study '{args.study}': its stored numerics advice is unreadable (not written by "
                         "this version of ipu-autotune?); nothing exported") from None
    from .host.pipeline import global_batch
    from .study import records as study_records

    base = next((r for r in study_records(study) if r.origin.startswith("baseline")), None)
    base_gb = global_batch(problem, base.config) if base is not None else None
    try:
        if args.format == "ipu-config":
            from .export.ipu_config import render_ipu_config

            text, lost = render_ipu_config(problem, record.config, _trace(problem, Console(stderr=True)))
            for line in lost:
                Console(stderr=True, highlight=False).print(f"[dim]ipu_config.json: {escape(line)}[/]", soft_wrap=True)
        else:
            text = export.render(args.format, problem, record.config, record.measurement, record.number,
                                 args.study, notes, base_gb)
    except ValueError as exc:
        raise UsageError(f"trial {record.number} cannot be exported safely: {exc}") from None
    if args.output:
        Path(args.output).write_text(text)
        Console(stderr=True).print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_show(args) -> int:
    from .study import best_record, records

    console = _console(args)
    study, problem = _load_study(args.storage, args.study)
    recs = records(study)
    best = best_record(study)
    base = next((r for r in recs if r.origin.startswith("baseline")), None)
    if args.trial is not None:
        return _show_trial(console, args, recs, base)
    if args.json:
        print(json.dumps({"study": args.study, "problem": problem.to_dict(),
                          "trials": [_record_json(r) for r in recs], "best": _record_json(best)}, indent=2))
        return 0
    table = ui.TrialTable(rows=max(1, len(recs)))
    for r in recs:
        table.add(r)
    console.print(table)
    console.print(_one_line(best, base, args.study), markup=False)
    if best is not None:
        console.print(ui.measurement_table(best.measurement, f"best trial {best.number}: memory per IPU"))
    console.print(f"details of one trial: ipu-autotune show --study {args.study} --trial N", markup=False,
                  highlight=False)
    return 0


def _show_trial(console, args, recs, base) -> int:
    match = [r for r in recs if r.number == args.trial]
    if not match:
        raise UsageError(f"study '{args.study}' has no finished trial {args.trial} "
                         f"(finished: {', '.join(str(r.number) for r in recs[:20]) or 'none'})")
    r = match[0]
    if args.json:
        print(json.dumps(_record_json(r), indent=2))
        return 0
    console.print(ui.trial_details(r, base))
    return 0



def cmd_report(args) -> int:
    from .report import write_report

    study, problem = _load_study(args.storage, args.study)
    path = write_report(study, problem, args.output or f"{args.study}.html")
    Console(stderr=True, highlight=False).print(f"wrote {path}", soft_wrap=True)
    return 0

def cmd_studies(args) -> int:
    import optuna

    console = _console(args)
    storage = open_storage(args.storage)
    rows = [_study_row(storage, s) for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        console.print(f"no studies in {mask_url(args.storage)}")
        return 0
    # The name is what --study takes: never cut, it gets the room it needs.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("study", no_wrap=True, overflow="fold")
    table.add_column("trials", justify="right", no_wrap=True)
    table.add_column("best samples/s", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=False)
    for r in rows:
        best = "-" if r["best_throughput"] is None else f"{r['best_throughput']:,.0f}"
        table.add_row(r["study"], str(r["trials"]), best, r["state"])
    console.print(table)
    return 0


def _study_row(storage, summary) -> dict:
    import optuna

    from .study import TrialState, best_record

    problem = summary.user_attrs.get("problem")
    row = {"study": summary.study_name, "trials": summary.n_trials,
           "model": problem.get("model") if problem else None,
           "micro_batch": problem.get("batch_size") if problem else None,
           "created": summary.datetime_start.isoformat(timespec="seconds") if summary.datetime_start else None,
           "best_trial": None, "best_throughput": None, "state": "not ipu-autotune"}
    if not problem:
        return row
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    best = best_record(study)
    trials = study.get_trials(deepcopy=False)
    running = sum(1 for t in trials if t.state == TrialState.RUNNING)
    # Trials measured; queued warm starts and retries are not yet trials of the study's story.
    row["trials"] = sum(1 for t in trials if t.state.is_finished())
    row["queued"] = sum(1 for t in trials if t.state == TrialState.WAITING)
    if best is not None:
        row["best_trial"], row["best_throughput"] = best.number, best.measurement.throughput
        row["state"] = "fits"
    else:
        row["state"] = "nothing fits" if row["trials"] else "empty"
    if running:
        row["state"] += f", {running} running"
    return row


def cmd_numerics(args) -> int:
    from .commands_numerics import command

    return command(args, _console(args))
