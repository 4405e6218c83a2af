"""The estimator corrected by the store: a prior for the guide fitted on other studies' records,
and its leave-one-study-out error against the nominal estimate.

Per target and SDK, every IPU of every recorded compile that reported its tiles (fitting or
out of memory) is a point of guide/memory_model.py's regression (fixed and proportional
parts, slopes per stage, replica and recomputation segment, a deviation per memory
category); every compile timed on the hardware a point of guide/call_model.py's device and
host factors. The fitted parts become the guide's prior (guide/prior.py): their posterior
mean, and a spread that is the posterior's widened by a fraction of the default prior's, since
a new model may differ from the ones recorded more than the records differ among themselves.
What each study's own memory parts left unexplained at its compiles is carried too
(`knob_rows`): rows of the guide's memory knob-effect model (guide/knob_effects.py), whose
correlation across studies is learnt there.

How much is read from the records themselves (`memory_scale`): with two or more studies,
each study's busiest tiles are predicted by a prior fitted on the others, as the guide
would predict them before that study's first compile, and the fraction of the default
spreads (of SCALES) under which those held-out tiles are likeliest is the one used, for the
shared parts' widening and for the per-model parts a store cannot carry (each layout's fixed
cost, the local departure corrected.local_memory_sd) alike. A store whose models agree gets
a sharp prior (the next study's first compile can go near the edge of memory), one whose
models differ a wide one. The call factors' widening is read the same way (`call_scale`).
With a single study there is nothing to hold out: the shared parts and the call factors are
widened by BETWEEN (a choice, not derived) and the per-model ones keep their defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from statistics import median
from typing import Any, TypeVar, cast

from ..guide.apart import layout
from ..guide.call_model import NOISE_SD, PRIOR_SD, CallModel, CallTime, call_time
from ..guide.corrected import local_memory_sd
from ..guide.features import split_fractions
from ..guide.memory_model import PRIORS, MemoryModel
from ..guide.memory_points import MemoryPoint, ipu_shares, recompute_segments
from ..guide.prior import GuidePrior, KnobRow
from ..guide.trust import held_out_errors
from ..host.pipeline import overlapped
from ..measurement import Measurement
from ..problem import Config
from .record import study_of

#: a fitted part's prior spread: sqrt(posterior sd^2 + (w x the default prior's sd)^2), with w
#: fitted by `memory_scale` (the call factors': `call_scale`) from two studies on, BETWEEN before
BETWEEN = 0.35
#: the scales `memory_scale` chooses among; the smallest keeps a few studies that happen to
#: agree from claiming a new model will match them to within a percent of a tile
SCALES = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
#: at most this many studies are held out in turn (a team's store may hold hundreds; each
#: held-out study costs a fit on all the others)
SCALE_FOLDS = 8
#: the memory parts a store prior sets (the per-layout parts stay the default's: layouts
#: differ per model)
SHARED = ("fixed", "proportional", "per stage", "per replica", "per checkpoint")
#: the knob-effect rows a prior carries at most, the newest studies' first (a fit of the
#: knob-effect model grows with the cube of its rows)
KNOB_ROWS = 48
T = TypeVar("T")


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
        # stored records: a breakdown of another length is read as far as it goes, as before
        for got, want, breakdown in zip(
            m["max_tile_bytes"], n["max_tile_bytes"], parts, strict=False
        ):
            out.append(
                MemoryPoint(
                    layout(c), want / cap, ipu_shares(breakdown), got / cap, recompute_segments(c)
                )
            )
    return out


def call_points(records: Iterable[dict[str, Any]]) -> list[CallTime]:
    return [p for _, p in timed_calls(records)]


def timed_calls(records: Iterable[dict[str, Any]]) -> list[tuple[Config, CallTime]]:
    """Each timed compile's config and call, as the guide's call model reads them."""
    out = []
    for r in records:
        m, n = r["measured"], r.get("nominal")
        if not n or not m.get("feasible") or not m.get("throughput") or not n.get("throughput"):
            continue
        nominal = Measurement(
            feasible=True,
            source="estimate",
            throughput=n["throughput"],
            samples_per_call=n.get("samples_per_call"),
            details={"call_shares": n.get("call_shares")},
        )
        got = Measurement(feasible=True, source="compile", throughput=m["throughput"])
        config = _config(r)
        p = call_time(nominal, overlapped(config), got)
        if p is not None:
            out.append((config, p))
    return out


def _split_at(r: dict[str, Any]) -> tuple[float, ...]:
    return split_fractions((r.get("profile") or {}).get("ops_by_stage") or [])


def knob_rows(records: list[dict[str, Any]]) -> tuple[KnobRow, ...]:
    """Each study's compiles, an IPU each, with what that study's own learnt memory parts
    (guide/memory_model.py) leave unexplained there, as its guide saw it, for the memory
    knob-effect model of a new study (guide/knob_effects.py). At most KNOB_ROWS, the newest
    studies' first.

    Speed is not carried this way: on the knob-response family's develop draws, other
    models' speed residuals made a new study's proposals worse (docs/calibration.md)."""
    by_study: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: -(r.get("written") or 0.0)):
        by_study.setdefault(study_of(r), []).append(r)
    rows: list[KnobRow] = []
    for study, rs in by_study.items():
        if len(rows) >= KNOB_ROWS:
            break
        tiles = [(r, i, p) for r in rs for i, p in enumerate(memory_points([r]))]
        if tiles:
            parts = MemoryModel([p for _, _, p in tiles])
            rows += [
                KnobRow(
                    _config(r),
                    _split_at(r),
                    study,
                    i,
                    p.measured - parts.tile(p.layout, p.estimated, p.shares, p.checkpoints)[0],
                )
                for r, i, p in tiles
            ]
    return tuple(rows[:KNOB_ROWS])


def fit_prior(records: list[dict[str, Any]], label: str = "") -> GuidePrior | None:
    """The guide's prior from `records` (of one target and SDK; the caller filters), or None
    when they hold nothing to learn from."""
    mem, calls = memory_points(records), call_points(records)
    if not mem and not calls:
        return None
    memory: dict[str, tuple[float, float]] = {}
    noise, memory_cov, scale = None, None, 1.0
    if mem:
        model = MemoryModel(mem, own_proportions=False)
        widening, scale = memory_scale(records)
        memory, memory_cov = _widened(model, widening)
        noise = model.noise
    call = None
    if calls:
        cm = CallModel(calls)
        call = (
            cm.log_device,
            cm.log_host,
            math.hypot(call_scale(records) * PRIOR_SD, 0.05 / math.sqrt(len(calls))),
        )
    studies = len({study_of(r) for r in records})
    return GuidePrior(
        memory,
        noise,
        call,
        len(records),
        studies,
        label,
        memory_scale=scale,
        memory_cov=memory_cov,
        memory_rows=knob_rows(records),
        speed_errors=tuple(
            e
            for timed in points_by_study(records, timed_calls).values()
            for e in held_out_errors([(layout(c), p) for c, p in timed])
        ),
    )


def _widened(
    model: MemoryModel, widening: float
) -> tuple[dict[str, tuple[float, float]], tuple[Any, ...]]:
    """The shared and per-category parts of a fitted model, as a prior: their means, and their
    posterior covariance with `widening` of the default prior's spread added to each part (as
    independent: a new model departs from the recorded ones part by part). Returns
    (name -> (mean, spread), covariance)."""
    names = [*SHARED, *(n for n in model.names if n.startswith("category "))]
    cov = model.covariance(names)
    for i, name in enumerate(names):
        cov[i][i] += (
            widening * PRIORS["category" if name.startswith("category ") else name][1]
        ) ** 2
    memory = {name: (model.part(name)[0], math.sqrt(cov[i][i])) for i, name in enumerate(names)}
    return memory, tuple(tuple(row) for row in cov)


def points_by_study(
    records: list[dict[str, Any]], points: Callable[[list[dict[str, Any]]], list[T]]
) -> dict[str, list[T]]:
    """`points` of each study's records, for the studies that have any (memory_scale and
    call_scale hold one study out at a time)."""
    by_study: dict[str, list[T]] = {}
    for r in records:
        by_study.setdefault(study_of(r), []).extend(points([r]))
    return {s: ps for s, ps in by_study.items() if ps}


def memory_scale(records: list[dict[str, Any]]) -> tuple[float, float]:
    """(the shared parts' widening, the per-model parts' scale): the scale of SCALES under
    which each study's busiest tiles, predicted from the other studies' records alone as the
    guide predicts a config before its study's first compile, are likeliest (the sum of their
    normal log densities), for both; (BETWEEN, 1) with fewer than two studies holding tiles."""
    by_study = points_by_study(records, memory_points)
    if len(by_study) < 2:
        return BETWEEN, 1.0
    score = dict.fromkeys(SCALES, 0.0)
    for held in sorted(by_study)[:SCALE_FOLDS]:
        fitted = MemoryModel(
            [p for s, ps in by_study.items() if s != held for p in ps], own_proportions=False
        )
        for scale in SCALES:
            memory, cov = _widened(fitted, scale)
            prior = GuidePrior(memory, fitted.noise, memory_scale=scale, memory_cov=cov)
            model = MemoryModel([], prior)
            for p in by_study[held]:
                mean, sd = model.tile(p.layout, p.estimated, p.shares, p.checkpoints)
                sd = math.hypot(
                    sd, local_memory_sd(prior)
                )  # as CorrectedModel.tiles with no compile near
                score[scale] += -math.log(sd) - 0.5 * ((p.measured - mean) / sd) ** 2
    best = max(SCALES, key=lambda s: (score[s], -s))
    return best, best


def call_scale(records: list[dict[str, Any]]) -> float:
    """The call factors' widening, as `memory_scale` reads the memory parts': the scale of
    SCALES (a fraction of call_model.PRIOR_SD) under which each study's call times, predicted
    from the factors the other studies' compiles give, are likeliest; BETWEEN with fewer than
    two studies timed. Models whose factors differ (one twice as fast on the device as the
    estimate says, another as fast as it says) get a wide prior, which a study's own first
    compiles move; models that agree, a sharp one."""
    by_study = points_by_study(records, call_points)
    if len(by_study) < 2:
        return BETWEEN
    score = dict.fromkeys(SCALES, 0.0)
    for held in sorted(by_study)[:SCALE_FOLDS]:
        others = [p for s, ps in by_study.items() if s != held for p in ps]
        fitted = CallModel(others)
        for scale in SCALES:
            # a call's log time moves one for one with the factor of the side that bounds it
            sd = math.sqrt((scale * PRIOR_SD) ** 2 + 0.05**2 / len(others) + NOISE_SD**2)
            for p in by_study[held]:
                error = math.log(
                    p.combined(fitted.device, fitted.host) / cast(float, p.measured_s)
                )
                score[scale] += -math.log(sd) - 0.5 * (error / sd) ** 2
    return max(SCALES, key=lambda s: (score[s], -s))


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
            mem_corrected.append(
                abs(model.tile(p.layout, p.estimated, p.shares, p.checkpoints)[0] - p.measured)
            )
        for call in call_points(held):
            assert call.measured_s is not None  # call_points passes the measurement to each
            measured = call.samples / call.measured_s
            tp_nominal.append(abs(math.log(call.samples / call.combined(1.0, 1.0) / measured)))
            tp_corrected.append(abs(math.log(calls.predict(call) / measured)))

    def med(xs: list[float]) -> float | None:
        return median(xs) if xs else None

    return {
        "studies": len(studies),
        "memory_points": len(mem_nominal),
        "throughput_points": len(tp_nominal),
        "memory_nominal": med(mem_nominal),
        "memory_corrected": med(mem_corrected),
        "throughput_nominal": med(tp_nominal),
        "throughput_corrected": med(tp_corrected),
    }
