"""What the Python API returns: a tune run's result and one configuration's estimate, as data,
with the exports and, in Jupyter, the CLI's own tables rendered as HTML (`_repr_html_`)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderableType
from rich.text import Text

from .backends.base import Measurement
from .errors import UsageError
from .guide.warmstart import is_baseline
from .present import ui
from .problem import Config, Problem
from .study.records import TrialRecord

if TYPE_CHECKING:
    import optuna

    from .commands.tune_report import TuneOutcome
    from .verification.verdict import Verdict

_PRE = (
    '<pre style="white-space:pre;overflow-x:auto;line-height:1.2;'
    'font-family:Menlo,Consolas,monospace">{code}</pre>'
)


def html(*renderables: RenderableType, width: int = 120) -> str:
    """Rich renderables as one self-styled HTML block (text escaped by rich), for a notebook."""
    console = Console(
        record=True, width=width, file=io.StringIO(), force_jupyter=False, force_terminal=True
    )
    for r in renderables:
        console.print(r)
    return console.export_html(inline_styles=True, code_format=_PRE)


@dataclass
class TuneResult:
    """A study after `ipu_autotune.tune`: the best trial and the baseline, every trial's record,
    and the best configuration as PopTorch code, `poptorch.Options`, ipu_config.json, a report."""

    study_name: str
    problem: Problem
    backend: str
    records: list[TrialRecord]
    best: TrialRecord | None
    baseline: TrialRecord | None
    study: optuna.Study = field(repr=False)  # for reading it further
    interrupted: bool = False
    files: dict[str, Path] = field(default_factory=dict)
    resume: str = ""
    #: what the last ipu_config() could not say as IPUConfig fields (FP16 weights, fixed scale...)
    ipu_config_notes: list[str] = field(default_factory=list, repr=False)
    #: with verify=True: the Verdict of training the best recipe beside the baseline's
    #: (docs/verify.md)
    verdict: Verdict | None = field(default=None, repr=False)

    @classmethod
    def from_outcome(cls, outcome: TuneOutcome) -> TuneResult:
        from .study.records import best_record, records

        study, problem = outcome.study, outcome.problem
        if study is None or problem is None:
            raise UsageError("the tune run ended before its study was opened")
        recs = records(study)
        base = next((r for r in recs if is_baseline(r.origin)), None)
        return cls(
            outcome.study_name,
            problem,
            outcome.backend,
            recs,
            best_record(study),
            base,
            study,
            outcome.interrupted,
            dict(outcome.files),
            outcome.resume,
        )

    @property
    def best_config(self) -> Config | None:
        return self.best.config if self.best else None

    @property
    def best_measurement(self) -> Measurement | None:
        return self.best.measurement if self.best else None

    @property
    def estimated(self) -> bool:
        return self.backend == "estimate"

    def _record(self, trial: int | None) -> TrialRecord:
        if trial is None:
            if self.best is None:
                raise UsageError(
                    f"study '{self.study_name}' has no configuration that fits yet; "
                    "export one anyway with trial=N"
                )
            return self.best
        for r in self.records:
            if r.number == trial:
                return r
        raise UsageError(f"study '{self.study_name}' has no finished trial {trial}")

    def _export(self, fmt: str, trial: int | None) -> tuple[str, list[str]]:
        from .commands.export import render_record

        return render_record(self.study, self.problem, self._record(trial), fmt, self.study_name)

    def snippet(self, trial: int | None = None) -> str:
        """The best trial (or trial N) as the PopTorch code `ipu-autotune export` writes."""
        return self._export("python", trial)[0]

    def options(self, trial: int | None = None) -> Any:
        """A real `poptorch.Options` built by the snippet's make_options(); needs PopTorch."""
        from .backends import sdk_available
        from .backends.poptorch.child import run_snippet

        if not sdk_available():
            raise UsageError(
                "PopTorch is not importable here (no Poplar SDK); .snippet() gives the code "
                "that builds these options where it is"
            )
        return run_snippet(self.snippet(trial), f"<{self.study_name} snippet>")["make_options"]()

    def ipu_config(
        self, path: str | Path | None = None, trial: int | None = None
    ) -> dict[str, Any]:
        """The trial as an optimum-graphcore ipu_config.json (IPUConfig fields only); written to
        `path` when given. How to train it (IPUTrainingArguments) is in `ipu_config_notes`."""
        text, self.ipu_config_notes = self._export("ipu-config", trial)
        if path is not None:
            Path(path).write_text(text)
        config: dict[str, Any] = json.loads(text)
        return config

    def report(self, path: str | Path) -> Path:
        """The study as one self-contained HTML page, as `ipu-autotune report` writes it."""
        from .report import write_report

        return write_report(self.study, self.problem, path)

    def summary(self) -> RenderableType:
        """The CLI's summary table: baseline vs best with memory bars, or the closest trial."""
        if self.best is not None and self.baseline is not None:
            return ui.comparison(self.problem, self.baseline, self.best, self.estimated)
        from .study.records import closest_record

        closest = self.best or closest_record(self.records)
        if closest is None:
            return Text("no trial measured yet")
        return ui.measurement_table(
            closest.measurement,
            f"closest: trial {closest.number}, {closest.measurement.verdict()}",
        )

    def _repr_html_(self) -> str:
        from .present.tune_summary import result_line

        head = result_line(self.best, self.baseline, self.study_name)
        if self.interrupted:
            head += " (interrupted)"
        lines = (
            ui.changes(self.baseline.config, self.best.config)
            if self.best and self.baseline
            else []
        )
        return html(
            Text(head, style="bold"), self.summary(), *(Text("  " + line) for line in lines)
        )

    def __repr__(self) -> str:
        from .present.tune_summary import result_line

        return f"<TuneResult {result_line(self.best, self.baseline, self.study_name)}>"


@dataclass
class EstimateResult:
    """One configuration through a backend (`ipu_autotune.estimate`): memory per IPU and speed."""

    problem: Problem
    config: Config
    measurement: Measurement
    rules_broken: list[str] = field(
        default_factory=list
    )  # recipe rules the config breaks, each with its fix

    @property
    def feasible(self) -> bool:
        return self.measurement.feasible

    @property
    def verdict(self) -> str:
        return self.measurement.verdict()

    @property
    def throughput(self) -> float | None:
        return self.measurement.throughput

    @property
    def memory(self) -> list[dict[str, Any]]:
        """One row per IPU: bytes by category, the total, and the busiest tile's use of a tile."""
        m = self.measurement
        return [
            {"ipu": i, **bd, "total": m.required_bytes[i], "tile_fraction": ui.tile_fraction(m, i)}
            for i, bd in enumerate(m.breakdown)
        ]

    def to_dict(self) -> dict[str, Any]:
        """As `ipu-autotune estimate --json` prints it."""
        return {
            **self.measurement.to_dict(),
            "problem": self.problem.to_dict(),
            "config": self.config.to_dict(),
            "rules_broken": list(self.rules_broken),
        }

    def _repr_html_(self) -> str:
        label = "estimated" if self.measurement.source == "estimate" else self.measurement.source
        speed = f"; {self.throughput:,.0f} samples/s ({label})" if self.throughput else ""
        return html(
            ui.measurement_table(
                self.measurement, f"{self.problem.model}: memory per IPU ({label})"
            ),
            Text(f"verdict: {self.verdict}{speed}"),
        )
