"""`ipu-autotune verify`: the baseline's recipe and the tuned one trained side by side on the CPU
for a few hundred steps of the user's data, with the IPU's FP16 numerics emulated, and a verdict
(verification/verdict.py). Exit 0 at parity, 5 (verdict.EXIT_FAILED_CHECK) when the tuned recipe
diverged, stalled or lags, 6 (verdict.EXIT_INCONCLUSIVE) when the baseline did not learn within the
budget; 2 on bad input (bad data included), before anything is stored."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..errors import UsageError
from ..options import TuneOptions, VerifyOptions
from ..options.problem_flags import problem_from_options
from ..present.wrap import Prose
from ..problem import Config, Problem, load_config_file
from ..verification.check import estimate_seconds, plan, run_check
from ..verification.samples import check_samples, read_samples
from ..verification.verdict import ATTR_VERIFY, Verdict

if TYPE_CHECKING:
    import optuna
    from torch import nn


def _config_file(path: str) -> tuple[Problem | None, Config]:
    if path.endswith(".json"):
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: not a readable JSON export ({exc})") from None
        if not isinstance(data, dict) or "config" not in data:
            raise UsageError(
                f"{path}: expected an export with a 'config' object (ipu-autotune export "
                "--format json)"
            )
        problem = (
            Problem.from_dict(data["problem"], f"{path} problem") if "problem" in data else None
        )
        return problem, Config.from_dict(data["config"], f"{path} config")
    loaded = load_config_file(path)
    if loaded.config is None:
        raise UsageError(
            f"{path}: no [config] table (ipu-autotune export --format toml writes one)"
        )
    return loaded.problem, loaded.config


def configs(args: VerifyOptions) -> tuple[Problem, Config, Config, optuna.Study | None]:
    """(problem, baseline, tuned, the study or None) from --study or --tuned/--baseline."""
    if args.study and not args.tuned:
        from ..study.records import best_record, records
        from .common import baseline_of, load_study

        study, stored = load_study(args.storage, args.study)
        best = best_record(study, skip_unreadable=True)
        base = baseline_of(records(study))
        if best is None or base is None:
            raise UsageError(
                f"study '{args.study}' has no "
                f"{'fitting trial' if best is None else 'baseline trial'} to verify"
            )
        problem = problem_from_options(args, stored)
        return problem, base.config, best.config, study
    if args.tuned and not args.study:
        file_problem, tuned = _config_file(args.tuned)
        base_problem, baseline = _config_file(args.baseline) if args.baseline else (None, Config())
        problem = problem_from_options(args, file_problem or base_problem)
        return problem, baseline, tuned, None
    raise UsageError(
        "verify: give one of --study NAME (its best against its baseline) and --tuned FILE"
    )


def verify(args: VerifyOptions, console: Console) -> Verdict:
    """The check the command runs, for the command and the Python API."""
    problem, baseline, tuned, study = configs(args)
    return verify_configs(args, console, problem, baseline, tuned, study)


def verify_tuned(
    args: TuneOptions, console: Console, study: optuna.Study, problem: Problem
) -> Verdict:
    """`tune --verify`: the study just tuned, its best against its baseline, verify's defaults."""
    from ..study.records import best_record, records
    from .common import baseline_of

    best, base = best_record(study, skip_unreadable=True), baseline_of(records(study))
    if best is None or base is None:
        raise UsageError(
            "tune --verify: the study has no fitting trial or no baseline trial to verify"
        )
    budget = VerifyOptions(
        data=args.data, samples=args.verify_samples, seed=args.seed or 0, quiet=args.quiet
    )
    return verify_configs(budget, console, problem, base.config, best.config, study)


def verify_configs(
    args: VerifyOptions,
    console: Console,
    problem: Problem,
    baseline: Config,
    tuned: Config,
    study: optuna.Study | None = None,
) -> Verdict:
    from ..models.zoo import build_model

    if not args.data:
        raise UsageError(
            "verify needs --data MODULE:FUNCTION: the loss of random labels says nothing about "
            "training; give the data you train on"
        )
    if problem.token_inputs or problem.inputs:
        raise UsageError(
            f"verify: {problem.model} takes token ids or named inputs; verify feeds one float "
            "image batch and class labels so far"
        )
    the_plan = plan(problem, baseline, tuned, args.steps, args.samples, args.lr)
    samples = read_samples(args.data, the_plan.samples)

    def build() -> nn.Module:
        return build_model(problem.model, problem.num_classes, device="cpu")

    warnings = check_samples(samples, args.data, problem.num_classes, build)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    quiet = args.quiet
    if not quiet:
        with console.status("Timing one update of each recipe…"):
            seconds = estimate_seconds(build, the_plan, samples)
        for r in (the_plan.baseline, the_plan.tuned):
            console.print(
                f"[dim]{r.label}: {r.describe()}; {the_plan.steps(r)} steps ({r.lr_line})[/]",
                highlight=False,
            )
        for note in the_plan.tuned.not_emulated():
            console.print(f"[dim]not emulated: {note}[/]", highlight=False)
        for note in the_plan.tuned.fp32_kept():
            console.print(f"[dim]FP32, as on the IPU: {note}[/]", highlight=False)
        console.print(
            f"verify: {the_plan.samples:,} samples per run ({samples.size:,} to train on, "
            f"{samples.eval_inputs.shape[0]} held out), 3 runs, about {seconds:,.0f} s on this "
            "CPU",
            highlight=False,
        )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
        transient=True,
    ) as bar:
        task = bar.add_task("training samples", total=the_plan.total_samples)
        verdict = run_check(
            build, the_plan, samples, seed=args.seed, progress=lambda n: bar.advance(task, n)
        )
    verdict.warnings = warnings
    if study is not None:
        study.set_user_attr(ATTR_VERIFY, verdict.to_dict())
    return verdict


def run(args: VerifyOptions) -> int:
    from .common import console_for

    console = console_for(args)
    verdict = verify(args, console)
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2, default=str))
    else:
        console.print(Prose(verdict.line()))
    return verdict.exit_code
