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
from typing import Any

from ..study.storage import mask_url
from .prior import fit_prior
from .recorder import Recorder
from .refusal import StoreRefused
from .store import check_store_url, default_url, open_store

#: the study's identity in the store (a user attribute set when the study is created): two
#: studies of the same name in two databases are two studies
ATTR_UID = "calibration_uid"


def store_url(storage_url: str, calibration_storage: str | None, off: bool) -> str | None:
    """The store a tune run uses (None: none), its URL checked (one line, exit 2, nothing touched)."""
    if off:
        return None
    if calibration_storage:
        check_store_url(calibration_storage)
        return calibration_storage
    return default_url(storage_url)


def new_uid() -> str:
    return uuid.uuid4().hex[:16]


def study_uid(study) -> str:
    """The study's identity: its stored uid, else (a study made before the store) its name."""
    uid = study.user_attrs.get(ATTR_UID)
    return uid if isinstance(uid, str) and uid else study.study_name


@dataclass
class Calibration:
    store: Any
    prior: Any = None  # guide.prior.GuidePrior, or None
    note: str = ""  # one line for the header
    recorder: Any = None  # calibration.recorder.Recorder: a Runner observer


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
        warn(f"calibration store {mask_url(url)}: {mask_url(first)}; this study runs uncorrected and records nothing")
    return None


def prepare(store, study, problem, profile, backend, guide, warn: Callable[[str], None]) -> Calibration | None:
    """Give `guide` (when there is one) the prior from other studies, and return what records
    this study's compiles (Calibration.store, a Recorder as `recorder`)."""
    if store is None:
        return None
    uid = study_uid(study)
    out = Calibration(store)
    sdk = backend.sdk
    if guide is not None and sdk:
        try:
            records, _ = store.records(target=problem.target, sdk=sdk)
        except Exception as exc:
            warn(f"calibration store {mask_url(store.url)}: not read ({type(exc).__name__}); "
                 "this study starts uncorrected")
            records = []
        others = [r for r in records if r.get("study_uid", r["study"]) != uid]
        if others:
            studies = len({r.get("study_uid", r["study"]) for r in others})
            label = f"{problem.target}, {sdk}: {len(others)} compile(s) of {studies} other stud{'y' if studies == 1 else 'ies'}"
            out.prior = fit_prior(others, label)
            if out.prior is not None:
                guide.screen.prior = out.prior
                out.note = f"guide's prior from the calibration store ({label})"
        if not out.note:
            out.note = f"calibration store: no other study's compiles on {problem.target}, {sdk} yet"
    out.recorder = Recorder(store, problem, profile, backend, study.study_name, uid, warn)
    return out
