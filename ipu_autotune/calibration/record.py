"""One compile as the calibration store keeps it (docs/calibration.md, "The record").

A record holds what the compile reported *and* the nominal estimate of the same config made
when it was written, so a later study can fit the estimator's error from records of models
it cannot trace (another team's model, an object model, a folder that is gone). Keyed by the
study's identity and the trial number: two workers writing the same compile store it once.
"""

from __future__ import annotations

import time
from collections import defaultdict
from itertools import pairwise
from typing import Any

from ..measurement import Measurement
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..version import __version__

#: the record's format; a store written with another one is refused (store.py)
FORMAT = 1


def key_of(study_uid: str, trial: int) -> str:
    return f"{study_uid}#{trial}"


def study_of(record: dict[str, Any]) -> str:
    """The study a record came from: its uid, or its name for a record written without one."""
    return str(record.get("study_uid", record["study"]))


def profile_summary(profile: ModelProfile, config: Config) -> dict[str, Any]:
    """Ops by kind (FLOP per kind, and the op count), parameters, activations saved per stage."""
    flops: dict[str, float] = defaultdict(float)
    for u in profile.units:
        for kind, f in u.flops.items():
            flops[kind] += f
    starts = sorted({i for p in config.splits if (i := profile.unit_index(p)) is not None})
    bounds = [0, *starts, len(profile.units)]
    stages = [sum(u.saved_bytes for u in profile.units[a:b]) for a, b in pairwise(bounds)]
    ops = [sum(u.ops for u in profile.units[a:b]) for a, b in pairwise(bounds)]
    return {
        "params": int(profile.params),
        "ops": int(sum(u.ops for u in profile.units)),
        "flops_by_kind": {k: float(v) for k, v in sorted(flops.items())},
        "activations_by_stage": stages,
        "ops_by_stage": ops,
        "micro_batch": profile.batch_size,
    }


def _memory(m: Measurement) -> dict[str, Any]:
    return {
        "tile_capacity_bytes": m.tile_capacity_bytes,
        "max_tile_bytes": list(m.max_tile_bytes),
        "required_bytes": list(m.required_bytes),
        "breakdown": [dict(b) for b in m.breakdown],
    }


def make_record(
    *,
    study: str,
    study_uid: str,
    trial: int,
    target: str,
    sdk: str,
    problem: Problem,
    profile: ModelProfile,
    config: Config,
    measured: Measurement,
    nominal: Measurement | None,
) -> dict[str, Any]:
    """The record of one compile. A throughput the estimator filled in (an offline compile,
    backends/screen.py) is not the hardware's: it is kept as None."""
    details = measured.details or {}
    estimated_speed = details.get("throughput_source") == "estimate"
    record = {
        "format": FORMAT,
        "key": key_of(study_uid, trial),
        "study": study,
        "study_uid": study_uid,
        "trial": int(trial),
        "target": target,
        "sdk": sdk,
        "estimator": f"ipu-autotune {__version__}",
        "model": problem.model,
        "problem": {"batch_size": problem.batch_size, "ipus": problem.ipus},
        "profile": profile_summary(profile, config),
        "config": config.to_dict(),
        "measured": {
            **_memory(measured),
            "source": measured.source,
            "feasible": measured.feasible,
            "failure": measured.failure,
            "throughput": None if estimated_speed else measured.throughput,
            "compile_seconds": details.get("compile_seconds"),
        },
        "nominal": None,
        "written": time.time(),
    }
    if nominal is not None:
        record["nominal"] = {
            **_memory(nominal),
            "throughput": nominal.throughput,
            "samples_per_call": nominal.samples_per_call,
            "call_shares": (nominal.details or {}).get("call_shares"),
        }
    return record


def check_record(record: Any) -> str | None:
    """Why a stored record cannot be used (None: it can)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("format") != FORMAT:
        return f"format {record.get('format')!r}, this ipu-autotune reads {FORMAT}"
    for k in ("key", "study", "target", "sdk", "config", "measured"):
        if k not in record:
            return f"no '{k}'"
    try:
        Config.from_dict(record["config"], "record config")
    except Exception as exc:  # a record from a newer Config, or hand-edited
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"its config does not read: {first_line}"
    return None


def matches(
    record: dict[str, Any], target: str | None, sdk: str | None, study: str | None
) -> bool:
    return (
        (target is None or record.get("target") == target)
        and (sdk is None or record.get("sdk") == sdk)
        and (study is None or record.get("study") == study)
    )
