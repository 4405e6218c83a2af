"""What the report shows, read from a study's stored trials (never re-measured)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna

from ..problem import Problem
from ..study.records import TrialRecord, best_record, closest_record, read_records
from ..verification.verdict import ATTR_VERIFY


@dataclass
class ReportData:
    study: optuna.Study
    problem: Problem
    records: list[TrialRecord]
    best: TrialRecord | None
    baseline: TrialRecord | None
    closest: TrialRecord | None  # when nothing fits
    #: trial number -> why its stored record is unreadable (left out of everything above)
    unreadable: dict[int, str] = field(default_factory=dict)
    #: the last `verify` verdict stored with the study (verification/verdict.py), as stored
    verify: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def sources(self) -> list[str]:
        return sorted({r.measurement.source for r in self.records})

    @property
    def estimated(self) -> bool:
        """Every figure came from the analytical model, none from a compile or a run."""
        return self.sources == ["estimate"]

    @property
    def feasible(self) -> list[TrialRecord]:
        return [r for r in self.records if r.feasible]


def gather(study: optuna.Study, problem: Problem) -> ReportData:
    recs, unreadable = read_records(study)
    best = best_record(study, skip_unreadable=True)
    baseline = next((r for r in recs if r.origin == "baseline"), recs[0] if recs else None)
    verify = study.user_attrs.get(ATTR_VERIFY)
    return ReportData(
        study,
        problem,
        recs,
        best,
        baseline,
        None if best else closest_record(recs),
        unreadable,
        verify if isinstance(verify, dict) else None,
    )


#: the estimator's `time_parts` that add up to one weight update (backends/estimate/timing.py);
#: its `input_per_micro_batch` is already inside "compute", so it is not stacked again
STEP_PARTS = {
    "compute": "compute (with input transfer)",
    "weight_update": "weight update (offloaded state)",
    "all_reduce": "gradient all-reduce",
    "host_per_step": "host call overhead",
}


HOST_INPUT = "host input (loading, casting)"


def step_parts(record: TrialRecord) -> dict[str, float]:
    """Seconds per weight update by part, as the backend stored them (estimate: `time_parts`),
    and the host input pipeline's, from its share of a call (`call_shares`, end to end)."""
    m = record.measurement
    parts = m.details.get("time_parts") or {}
    out = {
        label: float(parts[k])
        for k, label in STEP_PARTS.items()
        if isinstance(parts.get(k), (int, float)) and parts[k] > 0
    }
    host_share = (m.details.get("call_shares") or {}).get("host input")
    if (
        out
        and isinstance(host_share, (int, float))
        and host_share > 0
        and m.throughput
        and m.samples_per_call
    ):
        # A call takes samples_per_call / throughput seconds and holds device_iterations
        # weight updates; the host input is host_share of the call.
        per_update = m.samples_per_call / max(1, record.config.device_iterations)
        out[HOST_INPUT] = host_share / m.throughput * per_update
    return out


def bottleneck(record: TrialRecord) -> tuple[str, float] | None:
    """(what limits throughput, its share of the step) when the Measurement names it: its
    `bottleneck` and `bottleneck_share` fields (issue 11), or the same keys in its details."""
    m = record.measurement
    name = getattr(m, "bottleneck", None) or m.details.get("bottleneck")
    share = getattr(m, "bottleneck_share", None)
    share = share if share is not None else m.details.get("bottleneck_share")
    if not name:
        return None
    return str(name), float(share) if isinstance(share, (int, float)) else float("nan")
