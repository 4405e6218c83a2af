"""The steps of a tune run before its trials (commands/tune.py runs them in order): what is
searched, where the study is stored, the numerics advice, the calibration store, the guide,
and the study opened with its warm starts. Each step checks what it can before anything is
written: bad input fails in one line with nothing half-made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from rich.console import Console

from ..backends import resolve_backend_name
from ..backends.base import Backend
from ..backends.estimate.error_bars import kept_free
from ..calibration import session as calibration
from ..errors import UsageError
from ..options import DEFAULT_OUT, TuneOptions
from ..options.problem_flags import problem_from_options
from ..problem import Config, ConfigFile, Problem, load_config_file
from ..profiles.model_profile import ModelProfile
from ..rules.cross_field import validate
from ..search.space import SearchSpace
from ..study import parallel, records as st
from ..study.planning import NUMERIC_KNOBS, advised, warm_starts
from ..study.storage import check_url, open_storage
from .common import numerics_advice, trace, warn, with_host_data

if TYPE_CHECKING:
    from ..guide.guide import Guide
    from ..guide.proposal import Proposal
    from ..numerics.answer import NumericsAdvice


@dataclass(frozen=True)
class Search:
    """What the study searches: the problem, the model's profile, the space and the baseline;
    with the numerics advice, the knobs it sets (`prepare`) and the space without them."""

    problem: Problem
    profile: ModelProfile
    space: SearchSpace
    baseline: Config
    advice: NumericsAdvice | None = None
    prepare: Callable[[Config], Config] | None = None


@dataclass(frozen=True)
class Stored:
    """Where the study lives: its storage, the study already there (a resume), its name, the
    output folder and the calibration store's URL (None: none)."""

    url: str
    storage: optuna.storages.BaseStorage
    existing: optuna.Study | None
    name: str
    out_dir: Path
    calibration_url: str | None


@dataclass(frozen=True)
class Guidance:
    """The guide of a compiling backend and its warm starts (None, None on the estimator), and
    the tile memory the warm starts leave free."""

    guide: Guide | None
    warm: list[Proposal] | None
    headroom: float


def what_to_search(args: TuneOptions, console: Console) -> Search:
    """The problem (its host costs timed from --data), the profile, the space and the
    baseline, each checked; the URLs are checked before the model is traced."""
    if args.verify and not args.data:
        raise UsageError(
            "tune --verify needs --data MODULE:FUNCTION: the data both recipes train on"
        )
    problem = with_host_data(args, problem_from_options(args), console)
    # URLs that cannot work fail before the model is traced (open_stored uses them)
    check_url(args.storage)
    calibration.store_url(args.storage, args.calibration_storage, args.no_calibration)
    baseline_file = _baseline_file(args, problem)
    profile = trace(problem, console)
    space = _space(args, problem, profile)
    if baseline_file is not None and baseline_file.config is not None:
        baseline = baseline_file.config
    else:
        from ..guide.warmstart import naive_baseline

        baseline = naive_baseline(problem, profile)
    validate(
        problem, baseline, profile.module_order, where=args.baseline or "the default baseline"
    )
    return Search(problem, profile, space, baseline)


def _baseline_file(args: TuneOptions, problem: Problem) -> ConfigFile | None:
    """--baseline FILE, read and checked against the command line's problem."""
    if not args.baseline:
        return None
    baseline_file = load_config_file(args.baseline)
    if baseline_file.problem and baseline_file.problem != problem:
        raise UsageError(
            f"{args.baseline}: its [problem] differs from the command line; "
            "remove the [problem] table or match the flags"
        )
    if baseline_file.config is None:
        raise UsageError(f"{args.baseline}: no [config] table")
    return baseline_file


def _space(args: TuneOptions, problem: Problem, profile: ModelProfile) -> SearchSpace:
    """The search space: --space (or the built-in one), narrowed by --micro-batch, checked."""
    space = SearchSpace.load(problem, args.space)
    if args.micro_batch is not None:
        space = space.with_knob("micro_batch", args.micro_batch, "--micro-batch")
    if not space.ipu_layouts(problem, profile):
        raise UsageError(
            "no IPU layout fits the problem and the search space "
            "(check --ipus, --global-batch and the space's ipus_per_replica/replicas)"
        )
    st.check_space(
        space, problem, profile
    )  # a knob left without a valid value: before any storage
    return space


def open_stored(args: TuneOptions, search: Search) -> tuple[Stored, Search]:
    """The storage opened and the study in it, if any; resuming one, the problem as it has it."""
    parallel.check_jobs(args.jobs, args.storage)
    name = args.study or search.problem.slug
    resolve_backend_name(args.backend)  # its error before the storage is touched
    storage = open_storage(args.storage, args.heartbeat)  # unreachable: one line, before any note
    existing = st.load_existing(storage, name)
    if existing is not None:
        search = replace(search, problem=_resumable(args, existing, search.problem, name))
    calibration_url = calibration.store_url(
        args.storage, args.calibration_storage, args.no_calibration
    )
    out_dir = Path(args.out or Path(DEFAULT_OUT) / name)
    return Stored(args.storage, storage, existing, name, out_dir, calibration_url), search


def _resumable(
    args: TuneOptions, existing: optuna.Study, problem: Problem, study_name: str
) -> Problem:
    """The problem as the existing study has it, after checking this run may resume it: with
    the host costs it was created with (a new timing differs a little)."""
    stored = st.stored_problem(existing)
    if stored is not None:
        problem = replace(
            problem,
            host_float_sample_s=stored.host_float_sample_s,
            host_uint8_sample_s=stored.host_uint8_sample_s,
            host_worker_speedups=stored.host_worker_speedups,
        )
    st.check_same_problem(existing, problem)
    if args.baseline:  # warm starts are enqueued once, when a study is created
        raise UsageError(
            f"study '{study_name}' exists, so --baseline {args.baseline} would be ignored; "
            "drop --baseline to resume it, or give --study NEW_NAME to start a new study "
            "from this baseline"
        )
    return problem


def with_numerics(args: TuneOptions, search: Search, stored: Stored, console: Console) -> Search:
    """The numerics advice (stored with the study, or measured now) and the space without the
    knobs it sets; as it was without --no-numerics or where it cannot be measured."""
    if args.no_numerics:
        return search
    seed = (
        0 if args.seed is None else args.seed
    )  # the same advice on every run of the same command
    advice = numerics_advice(search.problem, search.space, stored.existing, console, seed)
    if advice is None:
        return search
    space = search.space.without(*NUMERIC_KNOBS)
    return replace(search, space=space, advice=advice, prepare=advised(advice, space))


def calibrated(
    stored: Stored, problem: Problem, backend: Backend
) -> calibration.Calibration | None:
    """The calibration store (docs/calibration.md), compiling backends only, with the guide's
    prior from other studies' records; a refused store is one warning line and the study
    runs uncorrected."""
    if stored.calibration_url is None or backend.name == "estimate":
        return None
    store = calibration.open_for_tune(stored.calibration_url, warn)
    uid = calibration.study_uid(stored.existing) if stored.existing is not None else None
    return calibration.give_prior(store, uid, problem, backend, warn)


def guidance(
    args: TuneOptions,
    search: Search,
    backend: Backend,
    calibration_found: calibration.Calibration | None,
) -> Guidance:
    """A compiling backend's guide, which ranks the later warm starts with what it learns, in
    every process (a --jobs worker and a resumed study too, not only the one that creates it).
    The estimator's warm starts climb to the most of a tile a trial may use and still fit."""
    if backend.name == "estimate":
        return Guidance(
            None, None, kept_free(search.problem.model, args.headroom, args.fit_confidence)
        )
    from ..guide.guide import Guide, GuideSettings
    from ..guide.warmstart import proposals

    warm = proposals(
        search.problem,
        search.profile,
        search.space,
        search.baseline,
        headroom=args.headroom,
        prepare=search.prepare,
    )
    prior = calibration_found.prior if calibration_found is not None else None
    settings = GuideSettings(
        args.headroom, search.prepare, candidates=[p.config for p in warm], prior=prior
    )
    guide = Guide(search.problem, search.profile, search.space, settings)
    return Guidance(guide, warm, args.headroom)


def open_study(
    args: TuneOptions, search: Search, stored: Stored, guided: Guidance, backend: Backend
) -> tuple[optuna.Study, bool]:
    """The study, created with its space, identity and warm starts, or resumed; and whether it
    was created. The numerics advice is stored with it the first time there is one."""

    def on_create(study: optuna.Study) -> None:
        study.set_user_attr(st.ATTR_SPACE, search.space.to_dict())
        study.set_user_attr(calibration.ATTR_UID, calibration.new_uid())
        # the estimate backend's warm starts are plan's (study/planning.search): one search
        items = guided.warm or warm_starts(
            search.problem,
            search.profile,
            search.space,
            search.baseline,
            guided.headroom,
            search.prepare,
        )
        if guided.guide is not None:
            from ..guide.first_trials import first_trials
            from ..guide.guide import COMPILED_WARM_STARTS

            # with other studies' compiles (a calibration store's prior), the guide's choice first
            items = first_trials(
                guided.guide,
                items[:COMPILED_WARM_STARTS],
                lambda c: backend.would_compile(search.problem, c),
            )
        st.enqueue(study, search.space, search.problem, search.profile, items)

    study, created = st.open_study(
        stored.storage, stored.name, search.problem, args.seed, on_create, args.heartbeat
    )
    if search.advice is not None and st.ATTR_NUMERICS not in study.user_attrs:
        study.set_user_attr(st.ATTR_NUMERICS, search.advice.to_dict())
    return study, created
