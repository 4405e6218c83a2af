"""A calibrated study's first trials: the guide's own first choice under a calibration
store's prior (docs/calibration.md), then the baseline."""

from __future__ import annotations

from collections.abc import Callable

from ..problem import Config
from .corrected import CorrectedModel
from .corrected_screen import CorrectedScreen
from .gain import expected_improvement
from .guide import EDGE_CONFIDENCE, Guide
from .proposal import History, Proposal, Reason

#: the chance to fit the guide's first choice under a store's prior needs (the guide's safe
#: choices need corrected.FIT_CONFIDENCE): an out-of-memory first compile spends the head start
#: the store gives, while a fitting one teaches this model's speed and memory at once
FIRST_CONFIDENCE = 0.95


def first_trials(
    guide: Guide, warm: list[Proposal], would_compile: Callable[[Config], bool] | None = None
) -> list[Proposal]:
    """The trials a new study enqueues when the guide has a prior: the guide's own first
    choice under the prior (the fastest candidate with FIRST_CONFIDENCE to fit; when none
    is that sure, `_even_or_likeliest`), then the baseline (the summary compares the best
    with it; calibration/session.prior_veto keeps it from compiling unless the prior says it
    likelier fits than not), in place of the baseline alone; the guide proposes from the third
    trial on, as it does from the second without a store. `warm` as tune would enqueue them
    (the baseline first); `would_compile`, the backend's verdict (Backend.would_compile): the
    first trial is one it would compile."""
    if not guide.has_prior:
        return warm
    # Nothing compiled yet, so the guide has no anchor to gather candidates around: the warm
    # starts' single-knob changes stand in (a sharded variant of a pipeline that the prior
    # puts over memory, say), judged under the prior.
    near = CorrectedScreen(
        CorrectedModel(guide.screen, [], guide.headroom, confidence=FIRST_CONFIDENCE),
        guide.neighbours,
    )
    for config in list(guide.pool):
        guide.pool.update(c for _, c in near.candidates(guide.space, config))
    first = guide.propose(History(would_compile=would_compile), confidence=FIRST_CONFIDENCE)
    if first is not None:
        first = Proposal.guided(
            first.config, Reason.PRIOR, first.chance, why="calibration store prior"
        )
    else:
        first = _even_or_likeliest(guide)
    if first is None or first.config == warm[0].config:
        return warm
    return [first, warm[0]]


def _even_or_likeliest(guide: Guide) -> Proposal | None:
    """When no candidate is FIRST_CONFIDENCE sure to fit: the fastest in expectation (chance
    to fit x speed, as the guide values a study's first fit) among those likelier to fit than
    not (the chance the guide climbs the edge of memory at), else the likeliest to fit (by the
    log of its chance, as Guide.propose's). Not the warm starts, which the nominal estimate
    chose and the prior may well rule out; and not the likeliest alone while an even bet
    exists: that is the slowest safe config, on the region family's develop draws a tenth of
    the speed of what fitted next (docs/calibration.md)."""
    model = CorrectedModel(guide.screen, [], guide.headroom)
    closed = guide.closed(set())  # Guide.propose was told would_compile
    open_ = [c for c in guide.pool if c not in closed]
    even = [c for c in open_ if model.chance(c) >= EDGE_CONFIDENCE]
    pick: Config | None
    if even:
        pick = max(even, key=lambda c: expected_improvement(model, c, 0.0))
        why = "the fastest in expectation of those likelier to fit than not"
    else:
        pick = max(open_, key=lambda c: (model.log_chance(c), model.score(c)), default=None)
        why = "the likeliest to fit"
    if pick is None:
        return None
    return Proposal.guided(
        pick, Reason.PRIOR, model.chance(pick), why=f"{why} under the calibration store prior"
    )
