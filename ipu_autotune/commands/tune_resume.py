"""The command that goes on with a tune run's study (the storage password masked), and what
a Ctrl-C says: how to resume, or that nothing was started."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState
from rich.console import Console

from ..errors import UsageError
from ..models.objects import is_object
from ..options import TuneOptions
from ..options.problem_flags import (
    changed_options,
    command_line,
    problem_from_options,
    python_call,
    resume_keywords,
)
from ..problem import Problem
from ..study.storage import mask_url


def say_resume(args: TuneOptions, study: optuna.Study | None, problem: Problem | None) -> bool:
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
        said + resume_command(args, problem, args.storage, name), soft_wrap=True, markup=False
    )
    return True


def resume_command(
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
