"""Estimator-guided proposals during a study: one model of this IPU, one rule for the next compile.

The analytical model is off for any real IPU by some tens of percent, in memory (code size,
tile imbalance) and in time (host, per-step costs), and differently for different knobs.
Each compile tells us by how much where it ran: guide/corrected.py learns the IPU's memory
structure (guide/memory_model.py), its device and host time (guide/call_model.py) and, as a
function of every knob, what those leave unexplained (guide/knob_effects.py), each with its
spread; where the compiles' tiles landed outside what the model of the compiles before them
forecast, the memory spreads widen (guide/hindsight.py). The guide gathers candidates
(single-knob changes and pairs around the best configurations measured, a climb per IPU
layout, at the learnt margin, at the edge of memory and on expected throughput) and proposes
the one with the largest expected gain on the best measured: its chance to fit times the
part of its speed's spread above the model's figure for the best raised by the learnt
compile noise (guide/gain.py: a gain within the noise is worth nothing); once a config
fits, among those more likely to fit than not while one is worth a compile (guide/likely.py).
While nothing fits, that is its expected throughput. A candidate near a compile still running
is worth less by how much its outcome is that compile's (the two share the learnt effects:
local penalisation). Before any compile has returned, the first round weighs each candidate by
what it adds to the round's expected best (guide/blind.py). When no untried candidate is
expected to gain STOP_GAIN on the best, more compiles are unlikely to pay, and `stopping`
says so with that gain.

With the estimate backend there is nothing to learn (the measurements are the model), so
the study does not use a guide there.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence, Set
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from ..backends.estimate import estimate
from ..backends.estimate.constants import NOMINAL, EstimatorConstants
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..search.space import SearchSpace
from .apart import layout
from .blind import BlindRound
from .bold import BetModel, GainModel, bet_climb
from .corrected import (
    FIT_CONFIDENCE,
    CandidatePool,
    CorrectedModel,
    Judgement,
    Observation,
    observe,
)
from .corrected_screen import CorrectedScreen
from .gain import bar, expected_improvement
from .hindsight import Forecasts, memory_factor
from .likely import likely_pick
from .moves import combined_changes
from .pairs import best_pair, merged
from .prior import GuidePrior
from .proposal import History, Proposal, Reason
from .stopping import STOP_GAIN, STOP_PATIENCE, Stop, compiles_since_best
from .untried import Closed
from .warmstart import Screen, climb

#: with a compiling backend, the warm starts enqueued before the guide takes over: the baseline,
#: whose compile teaches the correction; the guide ranks the rest
COMPILED_WARM_STARTS = 1
#: the confidence the edge of memory is climbed at (the safe climbs': corrected.FIT_CONFIDENCE)
EDGE_CONFIDENCE = 0.5
#: while no compile has returned: the extra memory margin of the model the candidates around
#: the anchors are gathered with, and of the round's first bet (the round's further bets are
#: weighed by its expected best: _first_round)
HEDGE = 0.10
#: the margins beyond the headroom each layout is climbed at for the first round: its
#: speed-memory frontier (a layout's fastest config and its leaner variants)
FRONTIER = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25)
#: single-knob changes of an anchor that are combined in pairs (the best by corrected score)
PAIR_TOP = 8
#: random combinations of two or three of an anchor's single changes gathered per proposal
COMBINATIONS = 24


def memory_correction(
    problem: Problem,
    profile: ModelProfile,
    measured: Sequence[Any],
    constants: EstimatorConstants,
    floor: float = 1.0,
) -> float:
    """Largest measured/estimated busiest-tile ratio over compiled trials (at least `floor`)."""
    ratios = []
    for config, m in measured:
        if m.source == "estimate" or not m.max_tile_bytes:
            continue
        predicted = estimate(problem, config, profile, constants)
        # a compile's IPUs may differ from the estimate's (an OOM without every IPU's tiles)
        for got, want in zip(m.max_tile_bytes, predicted.max_tile_bytes, strict=False):
            if want > 0:
                ratios.append(got / want)
    return max([floor, *ratios]) if ratios else floor


def pair_climb(
    screen: Screen, model: CorrectedModel, space: SearchSpace, start: Config, rounds: int = 12
) -> Config:
    """warmstart.climb on the corrected model, then pairs of the best single changes when
    no single one helps (recompute and accumulation, say, must often move together)."""
    best = climb(screen, space, start)
    for _ in range(rounds):
        singles = sorted(
            dict.fromkeys(
                c for knob, c in screen.candidates(space, best) if knob != "ipus_per_replica"
            ),
            key=model.score,
            reverse=True,
        )[:PAIR_TOP]
        top = best_pair(model, best, combinations(singles, 2))
        if top is None:
            break
        best = climb(screen, space, top)
    return best


@dataclass(frozen=True)
class GuideSettings:
    """How a Guide is set up, beside the problem, its profile and its space."""

    #: the share of a tile kept free before any compile has shown the IPU's memory
    headroom: float = 0.05
    #: applied to every candidate before it is judged (the numerics advice), as the study runs it
    prepare: Callable[[Config], Config] | None = None
    #: the estimator's constants the corrections start from
    constants: EstimatorConstants = NOMINAL
    #: the fastest compiles whose neighbourhoods are gathered at each proposal
    starts: int = 3
    #: configurations to rank from the start (the warm starts)
    candidates: Sequence[Config] = ()
    #: other studies' compiles (guide/prior.GuidePrior, from the calibration store)
    prior: GuidePrior | None = None


class Guide:
    """Proposes the next configuration to compile (`propose`), or None to let the sampler
    choose."""

    def __init__(
        self,
        problem: Problem,
        profile: ModelProfile,
        space: SearchSpace,
        settings: GuideSettings = GuideSettings(),
    ):
        self.problem, self.profile, self.space, self.settings = problem, profile, space, settings
        self.headroom, self.prepare, self.starts = (
            settings.headroom,
            settings.prepare,
            settings.starts,
        )
        # nominal, in the space, cached
        self.screen = Screen(problem, profile, settings.constants, 0.0, settings.prepare, space)
        self.screen.prior = settings.prior
        # config -> its single-knob changes (CorrectedScreen's cache)
        self.neighbours: dict[Config, list[tuple[str, Config]]] = {}
        self.pool = CandidatePool()  # every candidate gathered so far, re-ranked at each proposal
        self.pool.update(settings.candidates)
        self.climbed: set[tuple[Any, ...]] = set()  # (layout start, margin tag) climbed from
        self._stop: Stop | None = None  # the stopping rule, once it applies
        # (the history it was judged on, its Stop): stopping()
        self._stopped: tuple[Any, ...] | None = None
        self._would_compile: Callable[[Config], bool] | None = None  # the last history's
        self._verdicts: dict[Config, bool] = {}  # its answers so far (guide/untried.py)
        self._forecasts: Forecasts = {}  # each compile as the model before it saw it

    @property
    def has_prior(self) -> bool:
        return self.screen.prior is not None

    def stopping(self, history: History) -> Stop | None:
        """The stopping rule on `history` (None while further compiles are expected to pay),
        as the last proposal judged it when that was on the same history."""
        if self._stopped is None or self._stopped[0] != _key(history):
            self.propose(history)
        return self._stopped[1] if self._stopped is not None else None

    def prior_judgement(self, config: Config) -> Judgement | None:
        """The corrected model's judgement of `config` before any compile (the prior alone)."""
        return CorrectedModel(self.screen, [], 0.0).judge(config)

    def closed(self, tried: Set[Config]) -> Closed:
        """What not to propose: `tried`, and what the backend would not compile, as the last
        `propose` was told (guide/untried.py; its answers are kept across proposals)."""
        return Closed(set(tried), self._would_compile, self._verdicts)

    def propose(self, history: History, confidence: float = FIT_CONFIDENCE) -> Proposal | None:
        """The next configuration to compile and why, or None. `confidence`: the chance to fit
        the candidates are climbed at, and, before any compile, the least a proposal needs
        (a calibrated study's first compile asks more: guide/first_trials.py)."""
        # != : a bound method is made anew at each access
        if history.would_compile != self._would_compile:
            self._would_compile, self._verdicts = history.would_compile, {}
        out = self._choose(history, confidence)
        self._stopped = (_key(history), self._stop)
        return out

    def _choose(self, history: History, confidence: float) -> Proposal | None:
        measured, asked, tried = history.measured, history.asked, self.closed(history.asked)
        seen = observe(self.screen, measured)
        # Before any compile has returned, the first round (guide/blind.py); serially, a
        # calibration store's prior is the better guide (guide/first_trials.py).
        first_round = not seen and (history.running > 0 or self.screen.prior is None)
        widen = self.memory_factor(seen)
        model = CorrectedModel(
            self.screen,
            seen,
            self.headroom,
            HEDGE if first_round else 0.0,
            confidence=confidence,
            memory_factor=widen,
        )
        self._gather(model, measured, confidence)
        self._stop = None
        if first_round:
            first = self._first_round(seen, measured, asked, tried)
            return None if first is None else Proposal.guided(first, Reason.FIRST_ROUND, None)
        fitting = [
            (c, m.throughput)
            for c, m in measured
            if m.feasible and m.failure is None and m.throughput
        ]
        # the measured best as the model sees it, and the noise (guide/gain.py)
        best = bar(model, fitting)
        self._gather_edges(seen, best, widen)
        # no compile yet: the prior alone must make it likely
        least = confidence if not seen else 0.0
        done = {c for c, _ in measured}
        pending = [c for c in asked if c not in done]  # compiling elsewhere, or enqueued
        worth = {}
        model.prefetch(c for c in self.pool if c not in tried)
        for c in self.pool:
            if c not in tried and model.chance(c) >= least:
                worth[c] = expected_improvement(model, c, best) * model.apart(c, pending)
        pick = max(worth, key=worth.__getitem__, default=None)
        if best and measured:
            since, gain = compiles_since_best(measured), max(worth.values(), default=0.0)
            if gain < STOP_GAIN and since >= STOP_PATIENCE:
                self._stop = Stop(since, gain, len(model.speed))
        if best:
            pick = likely_pick(model, worth, EDGE_CONFIDENCE) or pick
        if pick is not None and worth[pick] <= 0.0 and not best and seen:
            # All judged all but certain to run out (the chance under-flows): the likeliest to fit
            # by the log of its chance, among those whose tiles no compile held (known tiles teach
            # nothing). Left to the sampler, such a study ended without a fit.
            pick = max(
                (c for c in worth if not model.tiles_known(c)),
                key=lambda c: (model.log_chance(c), model.score(c)),
                default=None,
            )
            return (
                None
                if pick is None
                else Proposal.guided(pick, Reason.FIRST_FIT, model.chance(pick))
            )
        if pick is None or worth[pick] <= 0.0:
            return None
        if best:
            return Proposal.guided(pick, Reason.GAIN, model.chance(pick), worth[pick])
        return Proposal.guided(pick, Reason.FIRST_FIT, model.chance(pick))

    def _gather(self, model: CorrectedModel, measured: Sequence[Any], confidence: float) -> None:
        """The candidates around the anchors (the fastest configs that fit, else the nearest to
        fitting): their single changes, pairs of the best of those, a climb from the best
        anchor, and a climb in every IPU layout."""
        corrected = CorrectedScreen(model, self.neighbours)
        fits = sorted(
            ((m.throughput or 0.0, c) for c, m in measured if m.feasible and m.failure is None),
            key=lambda t: t[0],
            reverse=True,
        )
        anchors = [c for _, c in fits[: self.starts]]
        if not anchors:
            near = sorted(
                ((m.violation, c) for c, m in measured if m.failure in (None, "oom")),
                key=lambda t: t[0],
            )
            anchors = [c for _, c in near[: self.starts]]
        for anchor in anchors:
            singles = [c for knob, c in corrected.candidates(self.space, anchor)]
            self.pool.update(singles)
            same_layout = [c for c in singles if c.ipus_per_replica == anchor.ipus_per_replica]
            top = sorted(same_layout, key=model.score, reverse=True)[:PAIR_TOP]
            for a, b in combinations(top, 2):
                if (pair := merged(anchor, a, b)) is not None:
                    self.pool.add(pair)
            # combinations no climb reaches, drawn anew as compiles arrive (the same in every run)
            draw = random.Random(f"{len(measured)} {anchor!r}")
            self.pool.update(
                c
                for c in combined_changes(anchor, same_layout, draw, COMBINATIONS)
                if self.screen(c) is not None
            )
            if anchor == anchors[0]:  # one climb per proposal: the best anchor's
                self.pool.add(pair_climb(corrected, model, self.space, anchor))
        # climbed once per margin, and apart at another confidence (a climb's end depends on it)
        tag = model.hedge if confidence == FIT_CONFIDENCE else (model.hedge, confidence)
        self._climb_layouts(model, corrected, tag)

    def memory_factor(self, seen: list[Observation]) -> float:
        """How much wider than the model says the spreads of tiles no compile held are: each
        compile as the model of the compiles before it foresaw it (guide/hindsight.py)."""
        return memory_factor(self.screen, seen, self.headroom, self._forecasts)

    def _gather_edges(self, seen: list[Observation], best: float, widen: float) -> None:
        """Candidates a climb at the learnt margin never reaches: every layout climbed at the
        edge of memory (EDGE_CONFIDENCE), and from each layout's fastest candidate were it to
        fit (guide/bold.py) on expected throughput and on the rule itself, expected gain."""
        edge = CorrectedModel(
            self.screen, seen, 0.0, confidence=EDGE_CONFIDENCE, memory_factor=widen
        )
        self._climb_layouts(edge, CorrectedScreen(edge, self.neighbours), "edge")
        for model in (
            BetModel(self.screen, seen, widen),
            GainModel(self.screen, seen, best, widen),
        ):
            # again as compiles teach the model: a start's best bet moves
            tag = (type(model).__name__, len(seen))
            for start in model.starts(self.pool):
                if (start, tag) not in self.climbed:
                    self.climbed.add((start, tag))
                    self.pool.add(
                        bet_climb(
                            CorrectedScreen(model, self.neighbours), model, self.space, start
                        )
                    )

    def _first_round(
        self, seen: list[Observation], measured: Sequence[Any], asked: Set[Config], tried: Closed
    ) -> Config | None:
        """Before any compile has returned: the candidate that adds most to the round's expected
        best throughput (guide/blind.py), given the trials running, among each layout's
        speed-memory frontier (its climbs at the FRONTIER margins). The estimator's errors
        differ most between layouts, and what the IPU holds beyond the estimate is unknown
        but shared: bets near the edge of memory in the one layout the estimator rates
        fastest run out together, where a leaner layout rated slower may be near the best.
        The round's first bet (serially the only one) is the fastest candidate at the safest
        margin; with compiles running, a further bet is worth what it adds where they run out."""
        done = {c for c, _ in measured}
        # every layout's start: the single changes of what was asked (the baseline, when it
        # is still compiling, has no measurement to anchor them)
        for c in sorted(asked, key=repr):
            self.pool.update(x for _, x in self.screen.candidates(self.space, c))
        for margin in FRONTIER:
            m = CorrectedModel(self.screen, seen, self.headroom + margin)
            self._climb_layouts(m, CorrectedScreen(m, self.neighbours), ("frontier", margin))
        blind, round_ = CorrectedModel(self.screen, seen, 0.0), BlindRound()

        def outcomes(c: Config) -> list[float] | None:
            j = blind.judge(c)
            return (
                None
                if j is None or j.busiest > 1.0
                else round_.outcomes(layout(c), j.busiest, j.throughput)
            )

        running = [
            o for c in sorted(set(asked) - done, key=repr) if (o := outcomes(c)) is not None
        ]
        # the round's first bet (serially, the only one): the fastest at the safest margin
        if not running:
            safe = CorrectedModel(self.screen, seen, self.headroom, HEDGE)
            first = max((c for c in self.pool if c not in tried), key=safe.score, default=None)
            if first is not None and safe.score(first)[0] == 1:
                return first
        worth = {
            c: round_.worth([*running, o])
            for c in self.pool
            if c not in tried and (o := outcomes(c)) is not None
        }
        return max(worth, key=worth.__getitem__, default=None)

    def _climb_layouts(
        self, model: CorrectedModel, screen: CorrectedScreen, tag: Hashable
    ) -> None:
        """Every IPU layout gets its own climb from its best candidate: a layout no compile has
        reached yet (replicas instead of a pipeline, say) needs several knobs changed at once.
        Per `tag` too (the hedge, or no margin): with compiles running elsewhere the first
        round judges each layout at its own margin (_first_round), climbed at each."""
        layouts: dict[tuple[Any, ...], Config] = {}
        model.prefetch(self.pool)
        for c in self.pool:
            # a pipeline and a sharded model on the same IPUs are different layouts
            key = layout(c)
            if key not in layouts or model.score(c) > model.score(layouts[key]):
                layouts[key] = c
        for c in layouts.values():
            if (c, tag) not in self.climbed:
                self.climbed.add((c, tag))
                self.pool.add(pair_climb(screen, model, self.space, c))


def _key(history: History) -> tuple[Any, ...]:
    """What a stopping rule depends on: which compiles finished and what was asked."""
    return len(history.measured), frozenset(history.asked), history.running
