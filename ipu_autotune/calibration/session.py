"""What a tune run does with the store: open it (a refused store is a warning, and the study
runs uncorrected), give the guide a prior from other studies' records on the same target and
SDK, and record this study's compiles.

With the estimate backend nothing is read or written: there is no guide to correct, and an
estimate recorded would only teach the estimator itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..study.storage import mask_url
from .prior import fit_prior
from .record import study_of
from .recorder import Recorder
from .refusal import StoreRefused
from .store import Store, check_store_url, default_url, open_store

if TYPE_CHECKING:
    import optuna

    from ..backends.base import Backend
    from ..guide.guide import Guide
    from ..problem import Config, Problem
    from ..profiles.model_profile import ModelProfile

#: the study's identity in the store (a user attribute set when the study is created): two
#: studies of the same name in two databases are two studies
ATTR_UID = "calibration_uid"


def store_url(storage_url: str, calibration_storage: str | None, off: bool) -> str | None:
    """The store a tune run uses (None: none), its URL checked (one line, exit 2, no writes)."""
    if off:
        return None
    if calibration_storage:
        check_store_url(calibration_storage)
        return calibration_storage
    return default_url(storage_url)


def new_uid() -> str:
    return uuid.uuid4().hex[:16]


def study_uid(study: optuna.Study) -> str:
    """The study's identity: its stored uid, else (a study made before the store) its name."""
    uid = study.user_attrs.get(ATTR_UID)
    return uid if isinstance(uid, str) and uid else study.study_name


@dataclass
class Calibration:
    store: Any
    prior: Any = None  # guide.prior.GuidePrior, or None
    note: str = ""  # one line for the header
    recorder: Any = None  # calibration.recorder.Recorder: a Runner observer

    def to_json(self, study: optuna.Study) -> dict[str, Any]:
        """For `tune --json`: the store, the guide's prior from it, this study's records in it."""
        try:
            mine = [
                r
                for r in self.store.records(study=study.study_name)[0]
                if r.get("study_uid") == study_uid(study)
            ]
        except Exception:  # the store went away meanwhile: say what is known
            mine = None
        return {
            "store": mask_url(self.store.url),
            "prior": self.prior.label if self.prior else None,
            "records_of_this_study": None if mine is None else len(mine),
        }


def open_for_tune(url: str | None, warn: Callable[[str], None]) -> Any:
    """The store, or None after one warning line when it is refused or unreachable."""
    if url is None:
        return None
    try:
        return open_store(url, create=True)
    except StoreRefused as exc:
        warn(f"{exc}; this study runs uncorrected and records nothing")
    except Exception as exc:  # unreachable server, permissions: the store is an aid
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        warn(
            f"calibration store {mask_url(url)}: {mask_url(first)}; this study runs uncorrected "
            "and records nothing"
        )
    return None


def give_prior(
    store: Store | None,
    uid: str | None,
    problem: Problem,
    backend: Backend,
    warn: Callable[[str], None],
) -> Calibration | None:
    """The prior fitted on the records of other studies (not `uid`'s) on the problem's target
    and the backend's SDK, for the guide of a compiling backend (Calibration.prior, handed to
    the Guide); the Calibration says what it did (`note`)."""
    if store is None:
        return None
    out = Calibration(store)
    sdk = backend.sdk
    if backend.name == "estimate" or not sdk:  # nothing is compiled: no guide to give it to
        return out
    try:
        records, _ = store.records(target=problem.target, sdk=sdk)
    except Exception as exc:
        warn(
            f"calibration store {mask_url(store.url)}: not read ({type(exc).__name__}); "
            "this study starts uncorrected"
        )
        records = []
    others = [r for r in records if study_of(r) != uid]
    if others:
        studies = len({study_of(r) for r in others})
        label = (
            f"{problem.target}, {sdk}: {len(others)} compile(s) of {studies} other "
            f"stud{'y' if studies == 1 else 'ies'}"
        )
        out.prior = fit_prior(others, label)
    if out.prior is not None:
        out.note = f"guide's prior from the calibration store ({out.prior.label})"
    else:
        out.note = f"calibration store: no other study's compiles on {problem.target}, {sdk} yet"
    return out


#: the baseline is not compiled when the prior gives it less than this chance to fit (it is
#: recorded as screened, from the nominal estimate): the user brought it because it ran out of
#: memory, and a compile the prior expects to do so again teaches less than a guided one
VETO_CHANCE = 0.5


def prior_veto(guide: Guide | None, baseline: Config) -> Callable[[Config], str | None] | None:
    """For ScreenedBackend.veto: the baseline, when the prior gives it under VETO_CHANCE to
    fit, is not compiled (8 minutes for a config the other studies say likely cannot fit). Every
    other candidate is the guide's or the sampler's to judge. None without a prior."""
    if guide is None or not guide.has_prior:
        return None

    def veto(config: Config) -> str | None:
        judged = guide.prior_judgement(config) if config == baseline else None
        if judged is None:  # not the baseline, or outside the space: the nominal screen decides
            return None
        chance = judged.chance
        return (
            (
                f"the estimate corrected by the calibration store gives it a {chance:.1%} chance "
                f"to fit (busiest tile {judged.busiest:.0%} of a tile)"
            )
            if chance < VETO_CHANCE
            else None
        )

    return veto


def attach(
    calibrated: Calibration | None,
    study: optuna.Study,
    problem: Problem,
    profile: ModelProfile,
    backend: Backend,
    warn: Callable[[str], None],
) -> Recorder | None:
    """The Recorder that writes this study's compiles (a Runner observer), or None."""
    if calibrated is None:
        return None
    recorder = Recorder(
        calibrated.store, problem, profile, backend, study.study_name, study_uid(study), warn
    )
    calibrated.recorder = recorder
    return recorder


def prepare(
    store: Store | None,
    study: optuna.Study,
    problem: Problem,
    profile: ModelProfile,
    backend: Backend,
    warn: Callable[[str], None],
) -> Calibration | None:
    """give_prior and attach at once, for an open study (tests, benchmarks); its prior is the
    guide's (Guide's `prior`)."""
    out = give_prior(store, study_uid(study), problem, backend, warn)
    attach(out, study, problem, profile, backend, warn)
    return out
