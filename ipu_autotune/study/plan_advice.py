"""What a plan advises: the exit-3 advice of `tune` (`best_changes`, quoting the plan) and,
where no size fits, the levers outside the search space (`levers`), each re-estimated and
kept only when it comes closer to fitting than the closest configuration."""

from __future__ import annotations

import dataclasses

from ..guide.least_memory import SIZES
from ..guide.nofit import (
    Change,
    layout_text,
    smaller_batch,
    state_line,
    tile_fraction,
    why_nothing_fits,
)
from ..measurement import Measurement
from ..problem import Config, Problem
from .planning import SizePlan, closest_plan, planned, smallest_fit


def more_ipus(problem: Problem, headroom: float, fit_confidence: float | None) -> list[Change]:
    """The plan at the sizes above the problem's: the smallest that fits, with its best
    configuration; when none does, one statement that no size fits, why, and what would."""
    plans: list[SizePlan] = []
    for sized in planned(
        problem, headroom, fit_confidence, tuple(n for n in SIZES if n > problem.ipus)
    ):
        plans.append(sized)
        if sized.fits and sized.micro_batch == problem.batch_size:
            break  # no larger size changes the answer below (the `plan` command shows them all)
    if not plans:
        return []
    fit = smallest_fit(plans)
    if fit is not None:
        # the smallest size that fits at the asked micro-batch, and a smaller one at a smaller
        # micro-batch where there is one
        same = next((p for p in plans if p.fits and p.micro_batch == problem.batch_size), None)
        picks = [fit] if same is None or same is fit else [fit, same]
        return [size_change(problem, p) for p in picks]
    closest = closest_plan(plans)
    said = "; ".join(
        nothing_fits_lines(problem, plans, headroom, fit_confidence, plan_shorter=False)
    )
    return [
        Change(
            "",
            f"no IPU count up to {max(SIZES)} fits (estimated): {said}",
            False,
            tile_fraction(closest.measurement),
        )
    ]


def size_change(problem: Problem, fit: SizePlan) -> Change:
    m, smaller = fit.measurement, fit.micro_batch != problem.batch_size
    flag = f"--ipus {fit.ipus}" + (f" --batch-size {fit.micro_batch}" if smaller else "")
    at = f"micro-batch {fit.micro_batch}" if smaller else "the same micro-batch"
    return Change(
        flag,
        f"the smallest size that fits at {at}: {layout_text(fit.config)}, {m.throughput:,.0f} "
        "samples/s (estimated; ipu-autotune plan shows every size)",
        True,
        tile_fraction(m),
    )


def best_changes(
    problem: Problem,
    config: Config,
    headroom: float,
    closest: Measurement | None = None,
    fit_confidence: float | None = None,
) -> list[Change]:
    """The changes that help, the one that helps most first (fits, then the lower busiest
    tile). A change the estimate puts no closer to fitting than the `closest` trial is left
    out: the advice never sends a user to hardware that is no better. A statement that no
    size fits (its flag empty) is kept: it is the answer."""
    from ..backends.estimate import EstimateBackend

    backend = EstimateBackend(headroom=headroom, fit_confidence=fit_confidence)
    found = [
        *more_ipus(problem, headroom, fit_confidence),
        smaller_batch(problem, config, backend),
    ]
    floor = tile_fraction(closest) if closest is not None else float("inf")
    kept = [
        c for c in found if c is not None and (c.fits or c.tile_fraction < floor or not c.flag)
    ]
    return sorted(kept, key=lambda c: (not c.fits, bool(c.flag), c.tile_fraction))


def nothing_fits_lines(
    problem: Problem,
    plans: list[SizePlan],
    headroom: float,
    fit_confidence: float | None,
    plan_shorter: bool = True,
) -> list[str]:
    """Where no size fits: the exact model state against the SRAM first, then the stage no split
    shrinks, then the levers that come closer."""
    closest = closest_plan(plans)
    sized = dataclasses.replace(problem, ipus=closest.ipus, batch_size=closest.micro_batch)
    return [
        state_line(sized, closest.config),
        why_nothing_fits(problem, plans),
        *levers(problem, closest, headroom, fit_confidence, plan_shorter),
    ]


def levers(
    problem: Problem,
    closest: SizePlan,
    headroom: float,
    fit_confidence: float | None,
    plan_shorter: bool = True,
) -> list[str]:
    """What outside the search space would bring the closest configuration of a plan closer,
    each re-estimated and kept only when it does: a serialisation factor past the space's
    (PopART's serializedMatMul takes any that divides the padded vocabulary), a shorter
    sequence (with plan's own answer at that length when `plan_shorter`)."""
    from ..backends.estimate import EstimateBackend
    from ..knob_spec import applies

    backend = EstimateBackend(headroom=headroom, fit_confidence=fit_confidence)
    sized = dataclasses.replace(problem, ipus=closest.ipus, batch_size=closest.micro_batch)
    floor = tile_fraction(closest.measurement)
    where = f"at {closest.ipus} IPUs, micro-batch {closest.micro_batch}"
    out = []
    if applies("embedding_serialization", sized, closest.config):
        tried = [
            (f, backend.measure(sized, closest.config.replace(embedding_serialization=f)))
            for f in (16, 32, 64)
        ]
        f, m = next(
            ((f, m) for f, m in tried if m.feasible), min(tried, key=lambda t: tile_fraction(t[1]))
        )
        if m.feasible or tile_fraction(m) < 0.99 * floor:
            out.append(
                f"embedding_serialization {f} (outside the space, which stops at 8): "
                + (
                    f"fits {where} (estimated)"
                    if m.feasible
                    else f"busiest tile {floor:.0%} -> {tile_fraction(m):.0%} {where} (estimated)"
                )
            )
    if problem.seq_len > 64:
        seq, shorter = problem.seq_len, None
        while seq > 64 and not (shorter is not None and shorter.feasible):
            seq //= 2
            shorter = backend.measure(_at_seq(sized, seq), closest.config)
        assert shorter is not None  # the loop ran: seq_len > 64
        if shorter.feasible or tile_fraction(shorter) < 0.99 * floor:
            said = (
                f"fits {where} (estimated)"
                if shorter.feasible
                else f"busiest tile {floor:.0%} -> {tile_fraction(shorter):.0%} {where}"
                " (estimated)"
            )
            if plan_shorter:
                said += "; " + _plan_at(problem, seq, headroom, fit_confidence)
            out.append(f"--seq-len {seq}: the closest configuration {said}")
    return out


def _at_seq(problem: Problem, seq: int) -> Problem:
    return dataclasses.replace(problem, seq_len=seq, input_shape=(), decoder_seq_len=0)


def _plan_at(problem: Problem, seq: int, headroom: float, fit_confidence: float | None) -> str:
    """plan's own answer at another sequence length: its smallest size that fits."""
    shorter = _at_seq(problem, seq)
    for p in planned(shorter, headroom, fit_confidence, SIZES):
        if p.fits:
            return (
                f"ipu-autotune plan at --seq-len {seq}: {p.ipus} IPU(s) at micro-batch "
                f"{p.micro_batch}, "
                f"{layout_text(p.config)}, {p.measurement.throughput:,.0f} samples/s"
            )
    return f"ipu-autotune plan at --seq-len {seq}: no IPU count up to {max(SIZES)} fits"
