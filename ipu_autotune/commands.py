"""What each subcommand does, given parsed arguments. Output goes through `ui`."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import export, parallel, ui
from .backends import resolve_backend_name
from .backends.base import Backend, Measurement
from .cli import DEFAULT_OUT, problem_from_args, resume_command
from .errors import UsageError
from .models.trace import profile_for
from .models.zoo import check_model_name
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
                             f"{list(problem.input_shape)} at micro-batch {problem.batch_size}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
                             "check --input-shape") from None


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
    problem = problem_from_args(args)
    check_url(args.storage)  # a URL that cannot work fails before the model is traced
    baseline_file = load_config_file(args.baseline) if args.baseline else None
    if baseline_file and baseline_file.problem and baseline_file.problem != problem:
        raise UsageError(f"{args.baseline}: its [problem] differs from the command line; "
                         "remove the [problem] table or match the flags")
    if baseline_file and baseline_file.config is None:
        raise UsageError(f"{args.baseline}: no [config] table")

    profile = _trace(problem, console)
    space = SearchSpace.load(problem, args.space)
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
        st.check_same_problem(existing, problem)
    backend = make_backend(args, problem, console, out_dir / "trials")
    estimated = backend.name == "estimate"
    advice = None if args.no_numerics else _numerics_advice(problem, space, existing, console)
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
    view = ui.TuneView(console, args.trials, quiet=args.quiet or args.json or args.worker)
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
    base = next((r for r in records if r.origin == "baseline"), records[0] if records else None)
    files = _write_outputs(out_dir, problem, study_name, records, best, _notes(advice))
    finished = sum(1 for r in ran if r.measurement.failure != "interrupted")
    remaining = args.trials - finished if runner.stop_requested and finished < args.trials else None
    resume = _resume(args, problem, storage_url, study_name, remaining)
    result = {
        "study": study_name, "storage": mask_url(storage_url), "backend": backend.name,
        "estimated": estimated, "trials_run": len(ran), "trials_total": len(records),
        "interrupted": runner.stop_requested,
        "baseline": _record_json(base), "best": _record_json(best),
        "closest": _record_json(closest),
        "files": {k: str(v) for k, v in files.items()}, "resume": resume,
        "numerics": advice.to_dict() if advice is not None else None,
        "compiles": _compile_counts(backend),
        "stopping_rule": guide.stop_note if guide is not None and guide.stop_note else None,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.quiet:
        console.print(_one_line(best, base, study_name), soft_wrap=True, markup=False)
    else:
        _print_summary(console, problem, base, best, closest, files, resume, estimated,
                       len(ran), runner.stop_requested, advice, _compile_counts(backend))
        if guide is not None and guide.stop_note:
            console.print(f"Stopping rule: {guide.stop_note}.", highlight=False)
    return 130 if runner.stop_requested and len(ran) < args.trials else 0


def _resume(args, problem: Problem, storage_url: str, study_name: str, trials: int | None = None) -> str:
    """The command that goes on with this study as this run did (the storage password masked)."""
    import shlex

    from .cli import DEFAULT_HEADROOM

    extra: list[str] = []
    if trials is not None:
        extra += ["--trials", str(trials)]
    if args.space:
        extra += ["--space", args.space]
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
    gb = f", global batch {problem.global_batch}" if problem.global_batch else ""
    where = "new study" if created else f"resuming at trial {len(study.trials)}"
    note = " — every figure is an estimate of the analytical IPU model" if backend.name == "estimate" else ""
    console.print(ui.panel(Text.assemble(
        (f"{problem.model}", "bold"), f"  micro-batch {problem.batch_size}, {shape}, {problem.optimizer}{gb}\n",
        f"{problem.ipus} x {problem.target.upper()} IPU   backend {backend.describe()}{note}\n",
        f"study {study_name} in {mask_url(storage_url)} ({where})"), "ipu-autotune"))


def _print_summary(console, problem, base, best, closest, files, resume, estimated, ran, interrupted,
                   advice=None, compiles=None) -> None:
    console.print()
    if best is None:
        console.print("[bold red]Nothing fits yet.[/]")
        if closest is not None:
            console.print(f"Closest: trial {closest.number}, {closest.measurement.verdict()}.")
            console.print(ui.measurement_table(closest.measurement, "where the memory goes"))
    else:
        console.print(ui.comparison(problem, base, best, estimated))
        lines = ui.changes(base.config, best.config)
        if lines:
            console.print("[bold]What changed[/] (baseline → best):")
            for line in lines:
                console.print(f"  {line}", highlight=False)
        speed = ui.speedup_line(base, best)
        if speed:
            console.print(f"[bold green]{speed}[/]" + (" (both estimated)" if estimated else ""))
    if advice is not None:
        from .numerics import summary_lines

        console.print("[bold]Numerics[/] (from the model's own gradients, measured on the CPU):")
        for line in summary_lines(advice):
            console.print(f"  {line}", highlight=False)
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
                   notes: list[str]) -> dict[str, Path]:
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
                                          notes))
            files["config" if fmt == "toml" else "snippet"] = path
    return files


# --- numerics -------------------------------------------------------------------------------------

NUMERIC_KNOBS = ("loss_scaling", "stochastic_rounding", "partials")


def _numerics_advice(problem: Problem, space: SearchSpace, existing, console):
    """The study's numerics advice: stored with it, or measured now (a few seconds on the CPU)."""
    from . import parallel, numerics
    from .study import ATTR_NUMERICS

    stored = existing.user_attrs.get(ATTR_NUMERICS) if existing is not None else None
    if stored:
        return numerics.NumericsAdvice.from_dict(stored)
    precision = space.knobs["precision"]
    if all(v == "32.32" for v in getattr(precision, "values", ())):
        return None  # nothing runs in FP16: nothing to advise
    with console.status("Measuring gradient statistics on the CPU for loss scaling, stochastic rounding "
                        "and partials…"):
        try:
            return numerics.advise(problem)
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


def _notes(advice) -> list[str]:
    if advice is None:
        return []
    from .numerics import summary_lines

    return ["Numerics, from the model's own gradients:", *summary_lines(advice)]


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
    problem = problem_from_args(args, file.problem if file else None)
    profile = _trace(problem, console)
    values = file.config.to_dict() if file and file.config else naive_baseline(problem, profile).to_dict()
    overrides = _parse_set(args.set)
    if "ipus_per_replica" in overrides and "available_memory_proportion" not in overrides:
        values.pop("available_memory_proportion", None)
    values.update(overrides)
    config = Config.from_dict(values, "config" if not args.config else f"{args.config} [config]")
    validate(problem, config, profile.module_order, where=args.config or "config")
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
    speed = f"  throughput {m.throughput:,.0f} samples/s, step {m.step_time_s * 1e3:.1f} ms ({label})" \
        if m.throughput else ""
    console.print(Text.assemble("verdict: ", verdict, speed))
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
                console.print(f"  {tip}", highlight=False)


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
        notes = _notes(NumericsAdvice.from_dict(stored)) if stored else []
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UsageError(f"study '{args.study}': its stored numerics advice is unreadable (not written by "
                         "this version of ipu-autotune?); nothing exported") from None
    try:
        text = export.render(args.format, problem, record.config, record.measurement, record.number, args.study,
                             notes)
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
    if args.json:
        print(json.dumps({"study": args.study, "problem": problem.to_dict(),
                          "trials": [_record_json(r) for r in recs], "best": _record_json(best)}, indent=2))
        return 0
    table = ui.TrialTable(rows=max(1, len(recs)))
    for r in recs:
        table.add(r)
    console.print(table)
    console.print(_one_line(best, next((r for r in recs if r.origin == "baseline"), None), args.study),
                  markup=False)
    if best is not None:
        console.print(ui.measurement_table(best.measurement, f"best trial {best.number}: memory per IPU"))
    return 0


def cmd_studies(args) -> int:
    import optuna

    console = _console(args)
    storage = open_storage(args.storage)
    rows = []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        problem = s.user_attrs.get("problem")
        rows.append({"study": s.study_name, "trials": s.n_trials,
                     "model": problem.get("model") if problem else None,
                     "micro_batch": problem.get("batch_size") if problem else None,
                     "created": s.datetime_start.isoformat(timespec="seconds") if s.datetime_start else None})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        console.print(f"no studies in {mask_url(args.storage)}")
        return 0
    table = Table("study", "model", "micro-batch", "trials", "started")
    for r in rows:
        table.add_row(r["study"], str(r["model"] or "-"), str(r["micro_batch"] or "-"), str(r["trials"]),
                      str(r["created"] or "-"))
    console.print(table)
    return 0


def cmd_numerics(args) -> int:
    from . import parallel, numerics

    return numerics.command(args, _console(args))
