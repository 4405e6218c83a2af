"""The estimator corrected by the store: a prior for the guide fitted on other studies' records,
and its leave-one-study-out error against the nominal estimate.

Per target and SDK, every IPU of every recorded compile that reported its tiles (fitting or
out of memory) is a point of guide/memory_model.py's regression (fixed and proportional
parts, slopes per stage, replica and recomputation segment, a deviation per memory
category); every compile timed on the hardware a point of guide/call_model.py's device and
host factors. The fitted parts become the guide's prior (guide/prior.py): their posterior
mean, and a spread that is the posterior's widened by BETWEEN of the default prior's, since
a new model may differ from the ones recorded more than the records differ among themselves.
The widening is a choice, checked by the leave-one-study-out error (`loso`), not derived.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import median
from typing import Any

from ..backends.base import Measurement
from ..guide.call_model import PRIOR_SD, CallModel, CallTime, call_time
from ..guide.corrected import layout
from ..guide.memory_model import PRIORS, MemoryModel, MemoryPoint, ipu_shares, recompute_segments
from ..guide.prior import GuidePrior
from ..host.pipeline import overlapped
from ..problem import Config
from .record import study_of

#: a fitted part's prior spread: sqrt(posterior sd^2 + (BETWEEN x the default prior's sd)^2)
BETWEEN = 0.35
#: the memory parts a store prior sets (the per-layout parts stay the default's: layouts differ per model)
SHARED = ("fixed", "proportional", "per stage", "per replica", "per checkpoint")


def _config(r: dict[str, Any]) -> Config:
    return Config.from_dict(r["config"], "record config")


def memory_points(records: Iterable[dict[str, Any]]) -> list[MemoryPoint]:
    out = []
    for r in records:
        m, n = r["measured"], r.get("nominal")
        if not n or m.get("failure") not in (None, "oom") or not m.get("max_tile_bytes"):
            continue
        if len(n["max_tile_bytes"]) != len(m["max_tile_bytes"]):
            continue
        cap = n.get("tile_capacity_bytes") or m.get("tile_capacity_bytes")
        if not cap:
            continue
        c = _config(r)
        parts = n.get("breakdown") or [None] * len(m["max_tile_bytes"])
        for got, want, breakdown in zip(m["max_tile_bytes"], n["max_tile_bytes"], parts):
            out.append(MemoryPoint(layout(c), want / cap, ipu_shares(breakdown), got / cap, recompute_segments(c)))
    return out


def call_points(records: Iterable[dict[str, Any]]) -> list[CallTime]:
    out = []
    for r in records:
        m, n = r["measured"], r.get("nominal")
        if not n or not m.get("feasible") or not m.get("throughput") or not n.get("throughput"):
            continue
        nominal = Measurement(feasible=True, source="estimate", throughput=n["throughput"],
                              samples_per_call=n.get("samples_per_call"),
                              details={"call_shares": n.get("call_shares")})
        got = Measurement(feasible=True, source="compile", throughput=m["throughput"])
        p = call_time(nominal, overlapped(_config(r)), got)
        if p is not None:
            out.append(p)
    return out


def fit_prior(records: list[dict[str, Any]], label: str = "") -> GuidePrior | None:
    """The guide's prior from `records` (of one target and SDK; the caller filters), or None
    when they hold nothing to learn from."""
    mem, calls = memory_points(records), call_points(records)
    if not mem and not calls:
        return None
    memory: dict[str, tuple[float, float]] = {}
    noise = None
    if mem:
        model = MemoryModel(mem)
        names = [*SHARED, *(n for n in model.names if n.startswith("category "))]
        for name in names:
            mean, sd = model.part(name)
            default = PRIORS["category" if name.startswith("category ") else name][1]
            memory[name] = (mean, math.sqrt(sd * sd + (BETWEEN * default) ** 2))
        noise = model.noise
    call = None
    if calls:
        cm = CallModel(calls)
        call = (cm.log_device, cm.log_host, math.hypot(BETWEEN * PRIOR_SD, 0.05 / math.sqrt(len(calls))))
    studies = len({study_of(r) for r in records})
    return GuidePrior(memory, noise, call, len(records), studies, label)


def loso(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Leave one study out: each study's compiles predicted by a prior fitted on the others,
    before any of its own compiles, against the nominal estimate. Median absolute error of
    the busiest tile per IPU (fraction of a tile) and of log throughput. None with one study."""
    studies = sorted({study_of(r) for r in records})
    if len(studies) < 2:
        return None
    mem_nominal, mem_corrected, tp_nominal, tp_corrected = [], [], [], []
    for s in studies:
        held = [r for r in records if study_of(r) == s]
        prior = fit_prior([r for r in records if study_of(r) != s])
        if prior is None:
            continue
        model, calls = MemoryModel([], prior), CallModel([], prior.call)
        for p in memory_points(held):
            mem_nominal.append(abs(p.estimated - p.measured))
            mem_corrected.append(abs(model.tile(p.layout, p.estimated, p.shares, p.checkpoints)[0] - p.measured))
        for p in call_points(held):
            measured = p.samples / p.measured_s
            tp_nominal.append(abs(math.log(p.samples / p.combined(1.0, 1.0) / measured)))
            tp_corrected.append(abs(math.log(calls.predict(p) / measured)))

    def med(xs: list[float]) -> float | None:
        return median(xs) if xs else None

    return {"studies": len(studies), "memory_points": len(mem_nominal), "throughput_points": len(tp_nominal),
            "memory_nominal": med(mem_nominal), "memory_corrected": med(mem_corrected),
            "throughput_nominal": med(tp_nominal), "throughput_corrected": med(tp_corrected)}
