"""Writing the store: a Runner observer that adds one record per compile, fitting or not.

Only compiles are recorded (a Measurement whose source is "compile" or "run", and whose
failure, if any, is the configuration's: out of memory, a compile error, a timeout). An
estimate teaches the estimator nothing about itself: the estimate backend's results, and a
candidate the screen kept from compiling, are never written. Nor is a trial that was
interrupted, refused before compiling, or whose setup crashed.

A write that fails (the database blinked, the disk filled) is said once and the study goes
on: the store is an aid, never a reason to lose a study.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends.estimate import estimate, profile_at_micro_batch
from ..measurement import Measurement
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..study.storage import mask_url
from .record import make_record

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..study.records import TrialRecord
    from .store import Store

#: failures that say something about the configuration on this SDK (the rest are ours or
#: the host's)
RECORDED_FAILURES = (None, "oom", "compile_error", "timeout")


def is_compile(m: Measurement) -> bool:
    return (
        m.source in ("compile", "run")
        and m.failure in RECORDED_FAILURES
        and not (m.details or {}).get("screened")
    )


class Recorder:
    """Call it with each finished TrialRecord (Runner.observers)."""

    def __init__(
        self,
        store: Store,
        problem: Problem,
        profile: ModelProfile,
        backend: Backend,
        study: str,
        study_uid: str,
        warn: Callable[[str], None] = lambda line: None,
    ):
        self.store, self.problem, self.profile, self.backend = store, problem, profile, backend
        self.study, self.study_uid, self.warn = study, study_uid, warn
        self.added = 0
        self.failed = False

    def sdk_of(self, m: Measurement) -> str:
        return (m.details or {}).get("sdk") or self.backend.sdk or f"{self.backend.name}-unknown"

    def record_of(self, trial: int, config: Config, m: Measurement) -> dict[str, Any] | None:
        sdk = self.sdk_of(m)
        if not is_compile(m) or sdk.startswith("estimate"):
            return None
        try:
            nominal = estimate(
                self.problem, config, profile_at_micro_batch(self.problem, config, self.profile)
            )
        except (
            Exception
        ):  # the record keeps what the compile said even when the estimator cannot judge
            nominal = None
        return make_record(
            study=self.study,
            study_uid=self.study_uid,
            trial=trial,
            target=self.problem.target,
            sdk=sdk,
            problem=self.problem,
            profile=self.profile,
            config=config,
            measured=m,
            nominal=nominal,
        )

    def __call__(self, rec: TrialRecord) -> None:
        if self.failed:
            return
        record = self.record_of(rec.number, rec.config, rec.measurement)
        if record is None:
            return
        try:
            self.added += bool(self.store.add(record))
        except Exception as exc:
            self.failed = True
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            self.warn(
                f"calibration store {mask_url(getattr(self.store, 'url', ''))}: not written "
                f"({mask_url(first)}); the study goes on without recording"
            )
