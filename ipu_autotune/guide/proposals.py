"""Estimator-guided proposals during a study, corrected by what the compiles showed.

The analytical model is off for any real IPU by some tens of percent, in memory (code size,
tile imbalance) and in time (host, per-step costs), and differently for different configs.
Each compile tells us by how much where it ran: guide/corrected.py learns the IPU's memory
structure (guide/memory_model.py) and its device and host time apart (guide/call_model.py).
The guide walks down the estimator's ranking *as corrected*: it gathers candidates around
the best configurations measured so far (single-knob changes, pairs of the most promising
ones, and a climb on the corrected model that tries pairs of knobs when no single one
helps), and proposes the fastest one likely to fit that was not tried yet, unless a probe
(`Guide._probe`: every IPU layout gets its chance) or a bet (guide/bold.py) is likelier to
pay. When that safe choice is not expected to beat the best measured, it proposes the
candidate with the largest expected gain on the best (guide/gain.py) instead: a compile
predicted slower than the best can only gain by luck. While nothing has fit, a faster
candidate whose compile is expected to give more (chance to fit times throughput) takes the
safe choice's place: the safe choice is often a slow layout. When the chance that an untried
candidate beats the best measured by STOP_BEAT is small, it says so (`stop_note`, with that
chance): more compiles are unlikely to pay.

With the estimate backend there is nothing to learn (the measurements are the model), so
the study does not use a guide there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from ..backends.estimate import estimate
from ..backends.estimate.constants import NOMINAL, EstimatorConstants
from ..profiles.trace import ModelProfile
from ..problem import Config, Problem
from .gain import beat_chance, chance_to_beat, expected_improvement
from .probe import ProbeModel
from .bold import BET_LOSSES, MIN_FIT_CHANCE, BetModel, bet_climb, bold_choice, losing_streak
from .corrected import FIT_CONFIDENCE, CandidatePool, CorrectedModel, CorrectedScreen, layout, observe
from .blind import BlindRound
from .pairs import best_pair, merged
from .untried import Closed
from ..search.space import SearchSpace
from .proposal import History, Proposal, Reason
from .warmstart import Screen, climb

#: with a compiling backend, the warm starts enqueued before the guide takes over: the baseline,
#: whose compile teaches the correction; the guide ranks the rest. (The safest climb was
#: enqueued second: chosen before any compile, it ran out of memory on most ResNet-101 random
#: hidden IPUs, where the guide's choice after the baseline's compile fitted.)
COMPILED_WARM_STARTS = 1
#: a compile "beats" the best measured when it is this much faster (compiles_since_best); with
#: no untried candidate expected to beat it so, a step to the edge of memory is tried
STOP_GAIN = 0.01
#: the stopping rule: stop when the chance that some untried candidate beats the best measured
#: by more than STOP_BEAT is under STOP_CHANCE (beat_chance),
STOP_BEAT, STOP_CHANCE = 0.05, 0.10
#: and this many compiles in a row did not beat the best by STOP_GAIN (the model alone said
#: "stop" at compile 3-5, before the tuner was within 5 % in half the runs)
STOP_PATIENCE = 3
#: a probe (Guide._probe) needs at least this chance to beat the best measured by STOP_BEAT
EXPLORE_CHANCE = 0.2
#: the confidence of a step to the edge of memory (the safe choice's is corrected.FIT_CONFIDENCE),
#: and the least chance to fit an expected-gain pick needs once BET_LOSSES bets in a row ran out
EDGE_CONFIDENCE = 0.5
#: while no compile has returned: the extra memory margin of the model the candidates around
#: the anchors are gathered with, and of the round's first bet (the round's further bets are
#: weighed by its expected best: _first_round)
HEDGE = 0.10
#: the margins beyond the headroom each layout is climbed at for the first round: its
#: speed-memory frontier (a layout's fastest config and its leaner variants, which a
#: single margin would not show)
FRONTIER = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25)
#: single-knob changes of an anchor that are combined in pairs (the best by corrected score)
PAIR_TOP = 8


def memory_correction(problem: Problem, profile: ModelProfile, measured: Sequence, constants: EstimatorConstants,
                      floor: float = 1.0) -> float:
    """Largest measured/estimated busiest-tile ratio over compiled trials (at least `floor`)."""
    ratios = []
    for config, m in measured:
        if m.source == "estimate" or not m.max_tile_bytes:
            continue
        predicted = estimate(problem, config, profile, constants)
        for got, want in zip(m.max_tile_bytes, predicted.max_tile_bytes):
            if want > 0:
                ratios.append(got / want)
    return max([floor, *ratios]) if ratios else floor


def pair_climb(screen: Screen, model: CorrectedModel, space: SearchSpace, start: Config, rounds: int = 12) -> Config:
    """warmstart.climb on the corrected model, then pairs of the best single changes when
    no single one helps (recompute and accumulation, say, must often move together)."""
    best = climb(screen, space, start)
    for _ in range(rounds):
        singles = sorted(dict.fromkeys(c for knob, c in screen.candidates(space, best) if knob != "ipus_per_replica"),
                         key=model.score, reverse=True)[:PAIR_TOP]
        top = best_pair(model, best, combinations(singles, 2))
        if top is None:
            break
        best = climb(screen, space, top)
    return best


class Guide:
    """Proposes the next configuration to compile (`propose`), or None to let the sampler choose.

    `candidates`: configurations to rank from the start (the warm starts); `prior`: other
    studies' compiles (guide/prior.GuidePrior, from the calibration store)."""

    def __init__(self, problem: Problem, profile: ModelProfile, space: SearchSpace, headroom: float = 0.05,
                 prepare: Callable[[Config], Config] | None = None, constants: EstimatorConstants = NOMINAL,
                 starts: int = 3, *, candidates: Sequence[Config] = (), prior=None):
        self.problem, self.profile, self.space = problem, profile, space
        self.headroom, self.prepare, self.constants, self.starts = headroom, prepare, constants, starts
        self.screen = Screen(problem, profile, constants, 0.0, prepare, space)  # nominal, in the space, cached
        self.screen.prior = prior
        self.neighbours: dict = {}  # config -> its single-knob changes (CorrectedScreen's cache)
        self.pool = CandidatePool()  # every candidate gathered so far, re-ranked at each proposal
        self.pool.update(candidates)
        self.climbed: set[tuple] = set()  # (layout start, margin tag) climbed from
        self.bets: set[Config] = set()  # configs proposed as bets over the predicted memory (search/bold.py)
        self._stop: Stop | None = None  # the stopping rule, once it applies
        self._stopped: tuple | None = None  # (the history it was judged on, its Stop): stopping()
        self._would_compile: Callable[[Config], bool] | None = None  # the last history's
        self._verdicts: dict[Config, bool] = {}  # its answers so far (guide/untried.py)

    @property
    def has_prior(self) -> bool:
        return self.screen.prior is not None

    def stopping(self, history: History) -> "Stop | None":
        """The stopping rule on `history` (None while further compiles are expected to pay),
        as the last proposal judged it when that was on the same history."""
        if self._stopped is None or self._stopped[0] != _key(history):
            self.propose(history)
        return self._stopped[1] if self._stopped is not None else None

    def first_trials(self, warm: list[Proposal], would_compile: Callable[[Config], bool] | None = None
                     ) -> list[Proposal]:
        """What a new study enqueues first: with a calibration store's prior, the guide's own
        first choice, then the baseline (guide/first_trials.py); else `warm` as it is."""
        from .first_trials import first_trials

        return first_trials(self, warm, would_compile)

    def prior_judgement(self, config: Config):
        """The corrected model's judgement of `config` before any compile (the prior alone)."""
        return CorrectedModel(self.screen, [], 0.0).judge(config)

    def propose(self, history: History, confidence: float = FIT_CONFIDENCE) -> Proposal | None:
        """The next configuration to compile and why, or None. While no compile has returned,
        each running trial adds a memory hedge to the candidates of its IPU layout
        (_first_round). `confidence`: the chance to fit a safe choice needs (a calibrated
        study's first compile asks more: guide/first_trials.py)."""
        if history.would_compile != self._would_compile:  # a bound method is made anew at each access
            self._would_compile, self._verdicts = history.would_compile, {}
        out = self._choose(history, confidence)
        self._stopped = (_key(history), self._stop)
        return out

    def _choose(self, history: History, confidence: float) -> Proposal | None:
        measured, running = history.measured, history.running
        asked, tried = history.asked, self.closed(history.asked)
        seen = observe(self.screen, measured)
        # While nothing is known, the first round weighs each candidate by what it adds to the
        # round's expected best (see _first_round); once a compile has
        # returned, the learnt correction is the better guide, and serially so is a calibration
        # store's prior (guide/first_trials.py).
        first_round = not seen and (running > 0 or self.screen.prior is None)
        model = CorrectedModel(self.screen, seen, self.headroom, HEDGE if first_round else 0.0,
                               confidence=confidence)
        corrected = CorrectedScreen(model, self.neighbours)
        fits = sorted(((m.throughput or 0.0, c) for c, m in measured if m.feasible and m.failure is None),
                      key=lambda t: t[0], reverse=True)
        anchors = [c for _, c in fits[:self.starts]]
        if not anchors:
            # Nothing fits yet: start from the configs nearest to fitting.
            near = sorted(((m.violation, c) for c, m in measured if m.failure in (None, "oom")), key=lambda t: t[0])
            anchors = [c for _, c in near[:self.starts]]
        for anchor in anchors:
            singles = [c for knob, c in corrected.candidates(self.space, anchor)]
            self.pool.update(singles)
            top = sorted((c for c in singles if c.ipus_per_replica == anchor.ipus_per_replica),
                         key=model.score, reverse=True)[:PAIR_TOP]
            for a, b in combinations(top, 2):
                if (pair := merged(anchor, a, b)) is not None:
                    self.pool.add(pair)
            if anchor == anchors[0]:  # one climb per proposal: the best anchor's
                self.pool.add(pair_climb(corrected, model, self.space, anchor))
        # climbed once per margin, and apart at another confidence (a climb's end depends on it)
        tag = model.hedge if confidence == FIT_CONFIDENCE else (model.hedge, confidence)
        self._climb_layouts(model, corrected, tag)
        if first_round:
            self._stop = None
            first = self._first_round(seen, measured, asked, tried)
            return None if first is None else Proposal.guided(first, Reason.FIRST_ROUND, None)
        best = fits[0][0] if fits else 0.0

        def proposal(config: Config | None, reason: Reason, chance: float | None = None) -> Proposal | None:
            if config is None:
                return None
            gain = model.score(config)[1] / best - 1.0 if best and model.score(config)[0] == 1 else None
            return Proposal.guided(config, reason, model.chance(config) if chance is None else chance, gain)

        ranked = sorted((c for c in self.pool if c not in tried), key=model.score, reverse=True)
        choice = next((c for c in ranked if model.score(c)[0] == 1), None)
        reason = Reason.SAFE
        if seen and not fits:
            choice, reason = self._first_fit(model, measured, tried, choice, confidence), Reason.FIRST_FIT
        probe = self._probe(seen, fits, measured, asked, tried, choice)
        exhausted = self._stopping_rule(model, choice, fits, measured)
        if probe is not None:
            self._stop = None
            self.bets.add(probe)
            return proposal(probe, Reason.PROBE)
        if exhausted and fits:
            # Nothing safe is expected to pay: the compile is worth what it is expected to
            # gain on the best measured (guide/gain.py: its chance to fit times its speed's
            # spread above the best). The best often sits at the edge of memory, where a climb
            # with the margin never reaches, so each layout is climbed again without one; and
            # a layout whose compiles all ran out of memory is unsure in speed as well. An OOM
            # teaches the memory model there.
            edge = CorrectedModel(self.screen, seen, 0.0, confidence=EDGE_CONFIDENCE)
            self._climb_layouts(edge, CorrectedScreen(edge, self.neighbours), "edge")
            # A candidate less likely to fit than a safe choice is a bet (guide/bold.py): no
            # long shots, and after BET_LOSSES of them in a row ran out of memory, none under
            # even odds (the model is then wrong at the edge in a way its compiles have not
            # yet corrected).
            losing = losing_streak(measured, self.bets) >= BET_LOSSES
            least = EDGE_CONFIDENCE if losing else MIN_FIT_CHANCE
            worth = {c: expected_improvement(edge, c, best) for c in self.pool
                     if c not in tried and edge.chance(c) >= least}
            pick = max(worth, key=worth.get, default=None)
            if pick is not None and (choice is None or worth[pick] > expected_improvement(edge, choice, best)):
                choice, reason = pick, Reason.GAIN
                if edge.chance(pick) < confidence:
                    self.bets.add(pick)
        if seen and (choice is None or compiles_since_best(measured) >= STOP_PATIENCE) \
                and losing_streak(measured, self.bets) < BET_LOSSES:
            bet = self._bet(seen, fits, choice, tried)
            if bet is not None:
                self.bets.add(bet)
                self._stop = None  # a bet is expected to pay: the stopping rule does not apply
                return proposal(bet, Reason.BET)
        if choice is None and not fits and seen:
            # Nothing has fit and nothing is judged likely to: the candidate likeliest to fit
            # (feasibility first; nearest to fitting on a tie) among those whose tiles no
            # compile has held. Left to the sampler, a study whose compiles all ran out of
            # memory had every trial screened by the estimate and ended without a fit; each
            # such compile moves the anchors and teaches the memory model.
            choice = max((c for c in self.pool if c not in tried and not model.tiles_known(c)),
                         key=lambda c: (model.chance(c), model.score(c)), default=None)
            reason = Reason.LIKELIEST
        if choice is not None and choice in self.bets and reason is not Reason.SAFE:
            reason = Reason.BET  # an expected-gain pick under the safe confidence
        return proposal(choice, reason)

    def _first_fit(self, model: CorrectedModel, measured: Sequence, tried: Closed,
                   choice: Config | None, confidence: float = FIT_CONFIDENCE) -> Config | None:
        """While nothing has fit: the safe choice (`choice`, the fastest candidate likely to fit),
        unless a faster candidate's compile is expected to give more (its chance to fit times its
        throughput), among those with at least a bet's chance to fit (MIN_FIT_CHANCE;
        EDGE_CONFIDENCE once BET_LOSSES such picks in a row ran out). The safe choice is often a
        layout far slower than a likely one: after BERT's 2 x 2 pipeline ran out by a third, it
        was a 2 x 2 sharded model with offload, given 0.8, which ran at 0.19 of the best known;
        a 4 x 1 pipeline given 0.65 ran at 0.54 (develop draw 20093). A surer but slower
        candidate does not take its place: on ResNet-101 that gave up speed for a chance to
        fit the safe choice mostly had already, and cost a compile in 3 of 10 develop runs."""
        least = EDGE_CONFIDENCE if losing_streak(measured, self.bets) >= BET_LOSSES else MIN_FIT_CHANCE
        pace = model.judge(choice).throughput if choice is not None else 0.0

        def faster(c: Config) -> bool:
            j = model.judge(c)
            return j is not None and j.throughput > pace and j.chance >= least

        worth = {c: expected_improvement(model, c, 0.0) for c in self.pool
                 if c == choice or (c not in tried and faster(c))}
        pick = max(worth, key=worth.get, default=None)
        if pick is not None and model.chance(pick) < confidence:
            self.bets.add(pick)
        return pick

    def closed(self, tried: set[Config]) -> Closed:
        """What not to propose: `tried`, and what the backend would not compile, as the last
        `propose` was told (guide/untried.py; its answers are kept across proposals)."""
        return Closed(set(tried), self._would_compile, self._verdicts)

    def _probe(self, seen: list, fits: list, measured: Sequence, asked: set[Config], tried: Closed,
               choice: Config | None) -> Config | None:
        """The candidate likeliest to beat the best measured by STOP_BEAT (`chance_to_beat`), when
        that chance is at least EXPLORE_CHANCE and twice the safe choice's, or the likeliest
        in an IPU layout nothing was compiled in, when its chance is half the likeliest's.

        Every IPU layout gets its chance before the guide settles: the estimator's errors
        differ most between layouts (a fixed cost per stage, an all-reduce unlike the
        model's), and a layout nothing was compiled in is known only through the others, so
        its compile teaches most. Each layout's fastest candidate is climbed twice: on
        expected throughput (a bet's climb, towards fast configs that likely fit) and on the
        chance to beat the best. Probes are bets: after BET_LOSSES of them in a row ran out of
        memory, the guide probes no more."""
        if not seen or not fits or losing_streak(measured, self.bets) >= BET_LOSSES:
            return None
        target = math.log(fits[0][0] * (1.0 + STOP_BEAT))
        probes = ProbeModel(self.screen, seen, target)
        for model in (BetModel(self.screen, seen), probes):
            # the bet climb's tag is _bet's: a start climbed here is not climbed again there
            tag = ("bet", len(seen)) if type(model) is BetModel else ("probe", len(seen))
            for start in model.starts(self.pool):
                if (start, tag) not in self.climbed:
                    self.climbed.add((start, tag))
                    self.pool.add(bet_climb(CorrectedScreen(model, self.neighbours), model, self.space, start))
        # a layout another worker is compiling is being explored: without this, each free worker
        # probed the same new layout (four 2 x 2 sharded probes at once, ResNet-50 draw 20088)
        done = {c for c, _ in measured}
        explored = {layout(c) for c, m in measured if m.source != "estimate" and m.failure in (None, "oom")} \
            | {layout(c) for c in asked if c not in done}
        chances = {c: chance_to_beat(probes, c, target) for c in self.pool if c not in tried}
        if not chances:
            return None
        likeliest = max(chances, key=chances.get)
        new = max((c for c in chances if layout(c) not in explored), key=chances.get, default=None)
        if new is not None and chances[new] >= max(EXPLORE_CHANCE, chances[likeliest] / 2):
            return new
        safe = chance_to_beat(probes, choice, target) if choice is not None else 0.0
        if compiles_since_best(measured) >= 1 and chances[likeliest] >= max(EXPLORE_CHANCE, 2 * safe):
            return likeliest
        return None

    def _bet(self, seen: list, fits: list, choice: Config | None, tried: Closed) -> Config | None:
        """After compiles that stall (or with nothing predicted to fit): the candidate with the
        largest expected improvement given the model's memory error (search/bold.py), if it
        beats what `choice` is expected to give. Each layout's fastest candidate
        (were it to fit) is climbed on expected throughput first, so the pool holds the best bets."""
        bets = BetModel(self.screen, seen)
        tag = ("bet", len(seen))
        for start in bets.starts(self.pool):
            if (start, tag) not in self.climbed:
                self.climbed.add((start, tag))
                self.pool.add(bet_climb(CorrectedScreen(bets, self.neighbours), bets, self.space, start))
        safe = CorrectedModel(self.screen, seen, 0.0).judge(choice) if choice is not None else None
        bet = bold_choice(bets, (c for c in self.pool if c not in tried), fits[0][0] if fits else 0.0,
                          safe.throughput if safe else 0.0)
        return bet

    def _first_round(self, seen: list, measured: Sequence, asked: set[Config], tried: Closed) -> Config | None:
        """Before any compile has returned: the candidate that adds most to the round's expected
        best throughput (guide/blind.py), given the trials running, among each layout's
        speed-memory frontier (its climbs at the FRONTIER margins). The estimator's errors
        differ most between layouts, and what the IPU holds beyond the estimate is unknown
        but shared: four bets at 0.83-0.94 of a tile in the layout the estimator rates fastest
        all ran out together on ResNet-152 (structural hand-made IPU), where a sharded model at
        0.74, rated half as fast, was within 5 % of the best known. The round's first bet
        (serially the only one) is the fastest candidate at the safest margin; with compiles
        running, a further bet is worth what it adds where the running ones run out."""
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
            return None if j is None or j.busiest > 1.0 else round_.outcomes(layout(c), j.busiest, j.throughput)

        running = [o for c in sorted(set(asked) - done, key=repr) if (o := outcomes(c)) is not None]
        if not running:  # the round's first bet (serially, the only one): the fastest at the safest margin
            safe = CorrectedModel(self.screen, seen, self.headroom, HEDGE)
            first = max((c for c in self.pool if c not in tried), key=safe.score, default=None)
            if first is not None and safe.score(first)[0] == 1:
                return first
        worth = {c: round_.worth([*running, o]) for c in self.pool if c not in tried and (o := outcomes(c)) is not None}
        return max(worth, key=worth.get, default=None)

    def _climb_layouts(self, model: CorrectedModel, screen: CorrectedScreen, tag) -> None:
        """Every IPU layout gets its own climb from its best candidate: a layout no compile has
        reached yet (replicas instead of a pipeline, say) needs several knobs changed at once.
        Per `tag` too (the hedge, or no margin): with compiles running elsewhere the first
        round judges each layout at its own margin (_first_round), climbed at each."""
        layouts: dict = {}
        for c in self.pool:
            key = layout(c)  # a pipeline and a sharded model on the same IPUs are different layouts
            if key not in layouts or model.score(c) > model.score(layouts[key]):
                layouts[key] = c
        for c in layouts.values():
            if (c, tag) not in self.climbed:
                self.climbed.add((c, tag))
                self.pool.add(pair_climb(screen, model, self.space, c))

    def _stopping_rule(self, model: CorrectedModel, choice: Config | None, fits: list, measured: Sequence) -> bool:
        """Sets the Stop when further compiles are unlikely to pay: the chance that an untried
        candidate beats the best measured by STOP_BEAT is under STOP_CHANCE, and the last
        STOP_PATIENCE compiles did not beat it. Returns whether the safe choice is expected
        to beat the best by STOP_GAIN (if not, a step to the edge of memory is tried)."""
        self._stop = None
        if not fits:
            return False
        best = fits[0][0]
        expected_gain = (model.score(choice)[1] / best - 1.0) if choice is not None else -1.0
        tried = self.closed({c for c, _ in measured})
        chance = beat_chance(model, (c for c in self.pool if c not in tried), best, STOP_BEAT)
        since = compiles_since_best(measured)
        if chance < STOP_CHANCE and since >= STOP_PATIENCE:
            self._stop = Stop(since, chance, len(model.speed))
        return expected_gain < STOP_GAIN


@dataclass(frozen=True)
class Stop:
    """The stopping rule, once it applies: more compiles are unlikely to pay."""

    compiles_since_best: int  # compiles that did not beat the best by STOP_GAIN
    beat_chance: float  # the chance that an untried candidate beats the best by STOP_BEAT
    compiles_ran: int  # compiles whose speed corrected the estimator

    def __str__(self) -> str:
        return (f"the last {self.compiles_since_best} compiles did not beat the best by {STOP_GAIN:.0%}, and the "
                f"chance that an untried candidate beats it by {STOP_BEAT:.0%} is {self.beat_chance:.0%} (the "
                f"estimator corrected by {self.compiles_ran} compile(s) that ran): further compiles are unlikely to pay")


def _key(history: History) -> tuple:
    """What a stopping rule depends on: which compiles finished and what was asked."""
    return len(history.measured), frozenset(history.asked), history.running


def compiles_since_best(measured: Sequence) -> int:
    """Compiles (fitting or out of memory) since the last one that beat the best before it by STOP_GAIN."""
    best, since = 0.0, 0
    for _, m in measured:
        if m.source == "estimate" or m.failure not in (None, "oom"):
            continue
        t = (m.throughput or 0.0) if m.feasible else 0.0
        if t > 0 and t >= best * (1 + STOP_GAIN):
            best, since = t, 0
        else:
            since += 1
    return since
