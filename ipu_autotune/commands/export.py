"""`ipu-autotune export`: a trial (the best by default) as TOML, Python or ipu_config.json."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from .. import export
from ..errors import UsageError
from ..options import ExportOptions
from .common import baseline_of, load_study, numerics_notes, trace

if TYPE_CHECKING:
    import optuna

    from ..problem import Problem
    from ..study.records import TrialRecord


def run(args: ExportOptions) -> int:
    from ..study.records import TrialRecord, best_record

    study, problem = load_study(args.storage, args.study)
    if args.trial is None:
        record = best_record(study)
        if record is None:
            raise UsageError(
                f"study '{args.study}' has no configuration that fits yet; "
                "export one anyway with --trial N"
            )
    else:
        match = [t for t in study.trials if t.number == args.trial]
        record = TrialRecord.from_trial(match[0]) if match else None
        if record is None:
            raise UsageError(f"study '{args.study}' has no finished trial {args.trial}")
    text, lost = render_record(study, problem, record, args.format, args.study)
    for line in lost:
        Console(stderr=True, highlight=False).print(
            f"[dim]ipu_config.json: {escape(line)}[/]", soft_wrap=True
        )
    if args.output:
        Path(args.output).write_text(text)
        Console(stderr=True, highlight=False).print(f"wrote {args.output}", soft_wrap=True)
    else:
        sys.stdout.write(text)
    return 0


def render_record(
    study: optuna.Study, problem: Problem, record: TrialRecord, fmt: str, study_name: str
) -> tuple[str, list[str]]:
    """A stored trial in `fmt` (python, toml, json, ipu-config, ipu-trainer) with the study's
    numerics notes and the baseline's global batch; and for ipu-config the notes on training it."""
    from ..numerics.answer import NumericsAdvice
    from ..study.records import ATTR_NUMERICS

    stored = study.user_attrs.get(ATTR_NUMERICS)
    try:
        notes = numerics_notes(NumericsAdvice.from_dict(stored), record.config) if stored else []
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UsageError(
            f"study '{study_name}': its stored numerics advice is unreadable (not written by "
            "this version of ipu-autotune?); nothing exported"
        ) from None
    from ..host.pipeline import global_batch
    from ..study.records import records as study_records

    base = baseline_of(study_records(study))
    base_gb = global_batch(problem, base.config) if base is not None else None
    try:
        if fmt in ("ipu-config", "ipu-trainer"):
            from ..export.ipu_config import render_ipu_config
            from ..export.trainer import render_trainer, trainer_notes

            # Rendered first either way: it refuses a configuration IPUConfig cannot express.
            text = render_ipu_config(problem, record.config, trace(problem, Console(stderr=True)))
            if fmt == "ipu-trainer":
                return render_trainer(problem, record.config, notes, base_gb), []
            return text, [
                *trainer_notes(record.config),
                "train it with: export --format ipu-trainer",
            ]
        return export.render(
            fmt,
            problem,
            record.config,
            record.measurement,
            record.number,
            study_name,
            notes,
            base_gb,
        ), []
    except ValueError as exc:
        raise UsageError(f"trial {record.number} cannot be exported safely: {exc}") from None
