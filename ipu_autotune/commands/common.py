"""What several subcommands share: the console, tracing the model, making the backend,
timing the host pipeline, opening a stored study and saying which of its trials are
unreadable, the numerics notes of an export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rich.console import Console

from ..backends import resolve_backend_name
from ..backends.base import Backend
from ..errors import UsageError
from ..guide.warmstart import is_baseline
from ..options import DEFAULT_OUT, MeasureOptions
from ..present.display import terminal_text
from ..problem import Config, Problem
from ..study.planning import numerics_unmeasured
from ..study.storage import file_missing, mask_url, open_storage

if TYPE_CHECKING:
    from collections.abc import Iterable

    import optuna

    from ..backends.screen import Veto
    from ..numerics.answer import NumericsAdvice
    from ..profiles.model_profile import ModelProfile
    from ..search.space import SearchSpace
    from ..study.records import TrialRecord


class PrintsJson(Protocol):
    """Options with --json."""

    @property
    def json(self) -> bool: ...


def console_for(options: PrintsJson) -> Console:
    # JSON goes to stdout alone; everything human goes to stderr then.
    return Console(stderr=options.json, highlight=False)


def trace(problem: Problem, console: Console) -> ModelProfile:
    # Imported here: building and tracing a model needs torch, which `show`, `studies` and
    # `report` never import (2-3 s of CPU per command).
    from ..models.zoo import check_model_name
    from ..profiles.trace import profile_for

    check_model_name(problem.model)
    with console.status(f"Tracing {problem.model} on the meta device (no weights, no memory)…"):
        try:
            return profile_for(problem)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(
                f"model '{problem.model}' could not be traced with input "
                f"{list(problem.inputs) or list(problem.input_shape)} at micro-batch "
                f"{problem.batch_size}: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
                + (
                    "check --input (NAME:SHAPE:DTYPE, one per forward argument)"
                    if problem.inputs or problem.token_inputs
                    else "check --input-shape, or describe several or integer inputs with --input"
                )
            ) from None


def measuring_backend(
    options: MeasureOptions,
    console: Console,
    work_dir: Path | None = None,
    estimate_headroom: float | None = None,
) -> Backend:
    """The backend --backend names, unscreened. `estimate_headroom`: the estimate backend's
    headroom when it answers alone (estimate's own verdict is by the tile limit: 0); else
    --headroom."""
    from ..backends.estimate import EstimateBackend

    name = resolve_backend_name(options.backend)
    if name == "estimate":
        # said once: by the command the user ran, not again by each --jobs worker it starts
        if options.backend == "auto" and not options.quiet and not options.worker:
            Console(stderr=True).print(
                "[dim]PopTorch not found: using the estimate backend; "
                "every figure is estimated.[/]"
            )
        if (
            estimate_headroom is not None
        ):  # `estimate`: the estimate's own verdict, by the tile limit
            return EstimateBackend(headroom=estimate_headroom)
        return EstimateBackend(headroom=options.headroom, fit_confidence=options.fit_confidence)
    from ..backends.poptorch import PopTorchBackend

    return PopTorchBackend(
        work_dir=work_dir or Path(DEFAULT_OUT), timeout_s=options.compile_timeout
    )


def screened(options: MeasureOptions, backend: Backend, veto: Veto | None = None) -> Backend:
    """A compiling backend screened by the estimator (--screen-margin; `veto`: a reason not to
    compile a config, ScreenedBackend's); the estimate backend as it is."""
    if backend.name == "estimate":
        return backend
    from ..backends.estimate import EstimateBackend
    from ..backends.screen import ScreenedBackend

    # Without screening the estimator still fills in throughput where an offline compile has none.
    margin = float("inf") if options.no_screen else options.screen_margin
    return ScreenedBackend(
        backend, EstimateBackend(headroom=options.headroom), margin=margin, veto=veto
    )


def make_backend(
    options: MeasureOptions,
    problem: Problem | None,
    console: Console,
    work_dir: Path | None = None,
    estimate_headroom: float | None = None,
) -> Backend:
    """The backend --backend names, screened per --screen-margin (measuring_backend, screened)."""
    return screened(options, measuring_backend(options, console, work_dir, estimate_headroom))


def warn(line: str) -> None:
    """One yellow line on stderr (a stored or user-given text shown escaped)."""
    Console(stderr=True, highlight=False).print(
        terminal_text(line), style="yellow", markup=False, soft_wrap=True
    )


def with_host_data(options: MeasureOptions, problem: Problem, console: Console) -> Problem:
    """The problem with its host costs timed from --data (a few seconds on this CPU): per
    sample, and how the loader scales with worker processes."""
    data = options.data
    if not data:
        return problem
    from dataclasses import replace

    from ..host.measure import DEFAULT_SECONDS, load, measure
    from ..host.workers import NotMeasured, measure_scaling

    try:
        with console.status(f"Timing --data {data} with loader workers…") as status:
            scaling = measure_scaling(
                load(data),
                progress=lambda w: status.update(
                    f"Timing --data {data} with {w} loader worker(s)…"
                ),
            )
        speedups, scaling_line = scaling.speedups, scaling.line()
    except NotMeasured as why:
        speedups, scaling_line = (
            (),
            f"loader workers not measured: {why}; assumed 0.9 of a process per worker",
        )
    with console.status(
        f"Timing the host input pipeline of --data {data} for {DEFAULT_SECONDS:g} s…"
    ) as status:
        measured = measure(
            data,
            worker_speedups=speedups,
            progress=lambda n, t: status.update(
                f"Timing the host input pipeline of --data {data}: {n:,} samples in {t:.1f} s…"
            ),
        )
    if not options.quiet:
        console.print(f"[dim]{measured.line()}[/]", highlight=False)
        console.print(f"[dim]{scaling_line}[/]", highlight=False)
    return replace(
        problem,
        host_float_sample_s=measured.float_sample_s,
        host_uint8_sample_s=measured.uint8_sample_s,
        host_worker_speedups=speedups,
    )


def load_study(storage_url: str, name: str) -> tuple[optuna.Study, Problem]:
    import optuna

    from ..study.records import stored_problem

    if file_missing(storage_url):  # opening it would create an empty database here
        raise UsageError(
            f"no study '{name}': {mask_url(storage_url)} does not exist; give the "
            "--storage the study was tuned in"
        ) from None
    storage = open_storage(storage_url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        hint = (
            f"; studies there: {', '.join(names[:8])}"
            if names
            else "; that storage holds no studies"
        )
        raise UsageError(f"no study '{name}' in {mask_url(storage_url)}{hint}") from None
    problem = stored_problem(study)
    if problem is None:
        raise UsageError(f"study '{name}' was not made by ipu-autotune")
    return study, problem


def numerics_notes(advice: NumericsAdvice | None, config: Config) -> list[str]:
    """The advice as it applies to the exported config (export/notes.py)."""
    from ..export.notes import numerics_notes as notes

    return notes(advice, config)


def numerics_advice(
    problem: Problem,
    space: SearchSpace,
    existing: optuna.Study | None,
    console: Console,
    seed: int = 0,
) -> NumericsAdvice | None:
    """The numerics advice `tune` sets and `estimate` suggests with: stored with the study
    (`existing`), or measured now (a few seconds on the CPU); None where it cannot be measured
    (study/planning.numerics_unmeasured says why)."""
    from ..numerics.advice import advise
    from ..numerics.answer import NumericsAdvice
    from ..study.records import ATTR_NUMERICS

    stored = existing.user_attrs.get(ATTR_NUMERICS) if existing is not None else None
    if stored:
        return NumericsAdvice.from_dict(stored)
    if numerics_unmeasured(problem, space):
        return None  # the knobs are searched instead
    with console.status(
        "Measuring gradient statistics on the CPU for loss scaling, stochastic rounding "
        "and partials…"
    ):
        try:
            return advise(problem, seed=seed)
        except UsageError:
            raise
        except (
            Exception
        ) as exc:  # advice is an aid: without it the study still searches these knobs
            console.print(f"[yellow]numerics advice skipped: {type(exc).__name__}: {exc}[/]")
            return None


def print_unreadable(console: Console, unreadable: dict[int, str]) -> None:
    """One line per trial whose stored record does not match the schema
    (study/records.read_records): the trial is left out, the rest of the study shows."""
    for reason in unreadable.values():
        console.print(
            terminal_text(f"unreadable, left out: {reason}"),
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def baseline_of(records: Iterable[TrialRecord]) -> TrialRecord | None:
    """The study's baseline trial, if it has one."""
    return next((r for r in records if is_baseline(r.origin)), None)
