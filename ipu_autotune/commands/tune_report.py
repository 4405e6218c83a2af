"""What a tune run ends with: the files, then the summary (or JSON, or one line), and the exit
code, as a TuneOutcome."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from rich.console import Console

from ..backends.base import Backend
from ..calibration import session as calibration
from ..guide.nofit import EXIT_NOTHING_FITS, lacks
from ..guide.proposal import History
from ..guide.warmstart import is_baseline
from ..options import TuneOptions
from ..present import intervals
from ..present.display import terminal_text
from ..present.outputs import compile_counts, lr_json, record_json, write_outputs
from ..present.tune_summary import print_summary, result_line
from ..problem import Problem
from ..study import records as st
from ..study.records import TrialRecord
from ..study.runner import Runner
from ..study.storage import mask_url
from .common import numerics_notes
from .tune_resume import resume_command

if TYPE_CHECKING:
    from ..guide.guide import Guide
    from ..guide.nofit import Change
    from ..numerics.answer import NumericsAdvice


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


def report_run(
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
    resume = resume_command(args, problem, storage_url, study_name, remaining)
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
