"""The estimator corrected by the compiles so far, config by config.

The analytical model is off for a real IPU by some tens of percent, and not by one constant:
a fixed cost per tile, tile imbalance per kind of op, the host and per-step costs differ, so
the error of a pipelined FP16 config is not that of a sharded FP32 one. Each compile tells us
the error where it ran (even an out-of-memory compile reports its tiles). Memory: the learnt
fixed and proportional parts (guide/memory_model.py) give each candidate's busiest tile per IPU
as a mean and a spread; what they leave unexplained is learnt as a function of the knobs that
change the tiles (guide/knob_effects.py, one output per IPU; the host's knobs change nothing
there), unsure by each knob's spread where nothing near was compiled. A candidate fits when
its chance to fit is at least `confidence`; before any compile, when the estimate leaves
`headroom` free. Time: the learnt device and host factors (guide/call_model.py), then the
residual as a function of every knob (guide/knob_effects.py). While no compile has returned,
the guide gathers candidates with a `hedge` added to the margin (guide.Guide.propose).

Only the estimator's outputs (busiest tile and breakdown per IPU, throughput, the call's
shares) and Config's fields are used, so the correction survives changes to the estimator's
constants and structure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from ..host.pipeline import overlapped
from ..measurement import Measurement
from ..problem import Config
from .apart import layout, memory_distance
from .call_model import CallModel, CallTime, call_time
from .features import featurizer_for
from .memory_model import MemoryModel
from .memory_points import MemoryPoint, memory_points, recompute_segments
from .prior import GuidePrior
from .residuals import Residuals
from .trust import CALIBRATED_SD, misfit
from .warmstart import Screen

#: a candidate "fits" when its learnt chance to fit is at least this
FIT_CONFIDENCE = 0.8
#: spread (fraction of a tile) of a config's busiest tile around the learnt memory parts where
#: no compile is near: knobs the compiles did not vary can add what the parts do not express
LOCAL_MEMORY_SD = 0.05
#: the knob-effect models (guide/knob_effects.py): a knob's prior spread of effect on the log
#: of a config's throughput, and a compile's own scatter around the model (run-to-run jitter)
SPEED_EFFECT, SPEED_NOISE = 0.05, 0.03
#: the prior spread of a group of structural choices' effect on log throughput (a layout; it
#: with its precision, optimizer and recomputation: features.GROUPS): the estimator's error
#: between published configurations (guide/trust.py). Every term's prior spread (these, the
#: knobs' and the interactions' over combinations of knob values) is scaled by the study's
#: misfit: an IPU the estimator is far off is as far off where nothing was compiled
SPEED_GROUP_EFFECT = CALIBRATED_SD
#: the same on a busiest tile beyond the learnt memory parts (fraction of a tile, scaled by a
#: store's prior as LOCAL_MEMORY_SD is); a compile's tiles are exact, so almost no scatter. The
#: learnt parts take up what is structural: a few compiles may move a knob's memory spread
#: by a factor of about 1.35 (MEMORY_SPREAD_SD), not pin one compile's excess on one knob
MEMORY_EFFECT, MEMORY_NOISE, MEMORY_SPREAD_SD = 0.02, 0.002, 0.3


@dataclass(frozen=True)
class Judgement:
    """What a corrected model says of one candidate."""

    # its busiest tile at the model's confidence stays under the limit (a bet's: any chance)
    fits: bool
    throughput: float  # corrected samples/s, were it to fit
    load: float  # busiest tile at the model's confidence, as a fraction of the limit
    busiest: float  # mean busiest tile, as a fraction of a tile
    chance: float  # chance to fit with no margin
    worth: float  # what the model ranks candidates by, in samples/s (CorrectedModel.score)


@dataclass(frozen=True)
class Observation:
    config: Config
    memory_ratio: float | None  # measured / estimated busiest tile (worst IPU)
    tiles: tuple[MemoryPoint, ...] = ()  # per IPU: estimated and measured busiest tile
    call: CallTime | None = None  # the estimate's call split into device and host, and as measured


def observe(screen: Screen, measured: Sequence[Any]) -> list[Observation]:
    """What each compiled trial says about the estimator's error (estimates say nothing)."""
    out = []
    for config, m in measured:
        if m.source == "estimate" or m.failure not in (None, "oom"):
            continue
        predicted = screen(config)
        if predicted is None:
            continue
        # a compile's IPUs may differ from the estimate's (an OOM without every IPU's tiles)
        ratios = [
            got / want
            for got, want in zip(m.max_tile_bytes, predicted.max_tile_bytes, strict=False)
            if want > 0
        ]
        tiles = tuple(memory_points(screen, [(config, m)], layout))
        call = call_time(predicted, overlapped(config), m)
        out.append(Observation(config, max(ratios) if ratios else None, tiles, call))
    return out


class CandidatePool(dict[Config, None]):
    """An insertion-ordered set of candidates (add, update, in, iteration): ties in the
    guide's ranking then fall the same way in every process, where a set's order follows
    string hashing (PYTHONHASHSEED) and so did the guide's proposals."""

    def add(self, config: Config) -> None:
        self[config] = None

    def update(self, configs: Iterable[Config] = ()) -> None:  # type: ignore[override]  # a set's update, not dict's
        for c in configs:
            self[c] = None


def local_memory_sd(prior: GuidePrior | None) -> float:
    """How far a config's busiest tile may depart from the learnt parts where no compile near
    it is known: LOCAL_MEMORY_SD, scaled by what a store's prior showed (guide/prior.py)."""
    return LOCAL_MEMORY_SD * (1.0 if prior is None else prior.memory_scale)


class CorrectedModel:
    """Estimates (via a nominal `Screen`, cached) corrected by what the compiles showed.

    Memory: guide/memory_model.py's fixed and proportional parts, learnt from every IPU of
    every compile, give each candidate's busiest tile per IPU as a mean and a spread; it
    fits when its chance to fit is at least `confidence`. Before any compile has reported
    its tiles there is nothing to learn: the estimate must leave `headroom` of the tile free.
    Speed: guide/call_model.py's device and host factors, then what they leave unexplained
    as a function of every knob (guide/knob_effects.py)."""

    def __init__(
        self,
        screen: Screen,
        observations: list[Observation],
        headroom: float,
        hedge: float = 0.0,
        confidence: float = FIT_CONFIDENCE,
        memory_factor: float = 1.0,
    ):
        """`hedge`: extra memory margin (fraction of a tile) while nothing has been compiled:
        parallel workers proposing while others' compiles run spread their bets.
        `memory_factor`: how much wider than the model says the spreads of tiles no compile
        held are (guide/hindsight.py)."""
        self.screen, self.headroom, self.hedge = screen, headroom, hedge
        self.memory_factor = memory_factor
        self.memory = [
            (o.config, o.memory_ratio) for o in observations if o.memory_ratio is not None
        ]
        # other studies' compiles (calibration store), when the screen carries them: guide/prior.py
        prior = getattr(screen, "prior", None)
        self.memory_model = MemoryModel([p for o in observations for p in o.tiles], prior)
        self.learnt_memory = bool(self.memory_model.points) or bool(
            prior is not None and prior.memory
        )
        # where nothing near was compiled, how far a config's tiles may depart from the parts
        self.local_sd = local_memory_sd(prior)
        # what the learnt parts leave unexplained at each compiled config, per IPU: blended into
        # the configs near it (an effect of one knob the linear parts cannot express)
        self.memory_residuals = [
            (
                o.config,
                [
                    p.measured
                    - self.memory_model.tile(p.layout, p.estimated, p.shares, p.checkpoints)[0]
                    for p in o.tiles
                ],
            )
            for o in observations
            if o.tiles
        ]
        self.compiled_tiles = [
            (o.config, [p.measured for p in o.tiles]) for o in observations if o.tiles
        ]
        # ... and as a function of each knob (guide/knob_effects.py): a knob no compile moved
        # keeps its prior spread, one they moved is learnt as a function of its value
        features = featurizer_for(screen.profile)
        self.memory_effects = Residuals(
            features,
            [(c, i, r) for c, rs in self.memory_residuals for i, r in enumerate(rs)],
            MEMORY_EFFECT * self.local_sd / LOCAL_MEMORY_SD,
            MEMORY_NOISE,
            memory=True,
            log_spread_sd=MEMORY_SPREAD_SD,
            foreign=prior.memory_rows if prior is not None else (),
        )
        self.calls = CallModel(
            [o.call for o in observations if o.call is not None],
            prior.call if prior is not None else None,
        )
        self.speed = [
            (o.config, self.calls.log_residual(o.call))
            for o in observations
            if o.call is not None and o.call.measured_s
        ]
        # what no compile measured is as unsure as the compiles show the estimator to be here
        self.misfit = misfit(
            [(layout(o.config), o.call) for o in observations if o.call is not None],
            prior.speed_errors if prior is not None else (),
            prior.call if prior is not None else None,
        )
        self.speed_effects = Residuals(
            features,
            [(c, None, r) for c, r in self.speed],
            SPEED_EFFECT,
            SPEED_NOISE,
            learn_noise=True,
            group_unit=SPEED_GROUP_EFFECT,
            widen=self.misfit,
        )
        self._z = NormalDist().inv_cdf(confidence)
        self.cache: dict[Config, Judgement | None] = {}

    @property
    def memory_prior(self) -> float:
        """The mean measured/estimated busiest-tile ratio."""
        return (
            math.exp(sum(math.log(r) for _, r in self.memory) / len(self.memory))
            if self.memory
            else 1.0
        )

    def tiles(self, config: Config, m: Measurement) -> tuple[list[tuple[float, float]], float]:
        """Per IPU (mean, spread) of the busiest tile as a fraction of a tile, and the limit
        (`m`: the config's nominal estimate)."""
        cap = m.tile_capacity_bytes
        if not self.learnt_memory:
            return [(t / cap, 0.0) for t in m.max_tile_bytes], 1.0 - self.headroom - self.hedge
        ipus = len(m.max_tile_bytes)
        same_program = [t for t in self._same_program(config) if len(t) == ipus]
        if (
            same_program
        ):  # the tiles a compile of this very program measured: it fits as that one did
            return [(max(t[i] for t in same_program), 0.0) for i in range(ipus)], 1.0 - self.hedge
        tiles = self.memory_model.busiest(layout(config), m, recompute_segments(config))
        effects = self.memory_effects.at_levels(config, range(len(tiles)))  # one per tile
        widen = self.memory_factor
        return [
            (mu + residual, widen * math.sqrt(sd * sd + spread * spread))
            for (mu, sd), (residual, spread) in zip(tiles, effects, strict=True)
        ], 1.0 - self.hedge

    def tiles_known(self, config: Config) -> bool:
        """Whether a compile held this config's very tiles (the same knobs that change what
        the tiles hold: apart.memory_distance 0): compiling it cannot teach memory, and it
        fits as that compile did. A tile-memory knob the estimate gives the same bytes at
        another value is not such a knob: the estimator seeing no memory in it here is a
        claim the knob-effect model weighs (its prior spread), not a fact."""
        return bool(self._same_program(config))

    def _same_program(self, config: Config) -> list[list[float]]:
        """The busiest tiles per IPU of every compile of this config's program on the tiles
        (the same tile-memory knobs: apart.memory_distance 0)."""
        return [t for c, t in self.compiled_tiles if memory_distance(config, c) == 0]

    def prefetch(self, configs: Iterable[Config]) -> None:
        """The knob effects of many candidates predicted at once (`judge` then reads them): the
        numbers one by one would give (to rounding: a product of many rows sums in another
        order), at a fraction of the cost."""
        memory, speed = [], []
        for c in configs:
            if c in self.cache or (m := self.screen(c)) is None or not m.max_tile_bytes:
                continue
            # as tiles() reads them: one per IPU the estimate gives tiles and (if any) a
            # breakdown for
            ipus = (
                min(len(m.max_tile_bytes), len(m.breakdown))
                if m.breakdown
                else len(m.max_tile_bytes)
            )
            if self.learnt_memory:
                memory.append((c, range(ipus)))
            speed.append((c, (None,)))
        self.memory_effects.prefetch(memory)
        self.speed_effects.prefetch(speed)

    def judge(self, config: Config) -> Judgement | None:
        """The corrected model's judgement, or None when the rules reject the config. Its
        worth is its corrected throughput: the fastest that fits ranks first."""
        if config in self.cache:
            return self.cache[config]
        m = self.screen(config)
        if m is None or not m.max_tile_bytes:
            self.cache[config] = None
            return None
        tiles, limit = self.tiles(config, m)
        load = max(mu + self._z * sd for mu, sd in tiles) / limit
        chance = min(
            NormalDist(mu, sd).cdf(1.0) if sd > 0 else float(mu <= 1.0) for mu, sd in tiles
        )
        speed = self._throughput(config, m)
        out = Judgement(load <= 1.0, speed, load, max(mu for mu, _ in tiles), chance, speed)
        self.cache[config] = out
        return out

    def _throughput(self, config: Config, m: Measurement) -> float:
        """Corrected throughput: the learnt device and host factors, then the config's residual."""
        call = call_time(m, overlapped(config))
        base = self.calls.predict(call) if call is not None else (m.throughput or 0.0)
        return base * math.exp(self.speed_effects(config)[0])

    def speed_sd(self, config: Config) -> float:
        """Spread of log(throughput) for a candidate: what the compiles leave unknown of the
        effects of the knobs that set it apart from them (guide/knob_effects.py). A layout
        whose compiles all ran out of memory has taught nothing about its speed."""
        return self.speed_effects(config)[1]

    @property
    def speed_noise(self) -> float:
        """The learnt scatter of log(throughput) from one compile of a config to the next."""
        return self.speed_effects.effects.noise

    def apart(self, config: Config, pending: Sequence[Config]) -> float:
        """How much of a compile of `config` is its own, with `pending` compiles (running
        elsewhere, not yet measured) still to report: the product over them of one less the
        prior correlation of their speeds (local penalisation, so that N workers do not bet
        on one outcome). 1 with nothing pending."""
        out = 1.0
        for rho in self.speed_effects.correlation(config, list(pending)):
            out *= 1.0 - max(0.0, min(1.0, rho))
        return out

    def chance(self, config: Config) -> float:
        j = self.judge(config)
        return 0.0 if j is None else j.chance

    def log_chance(self, config: Config) -> float:
        """log of the chance to fit, which does not under-flow where the chance does (past 8.3
        spreads over the edge: NormalDist.cdf is 1 + erf): where all run out, the likeliest."""
        m = self.screen(config)
        if m is None or not m.max_tile_bytes:
            return float("-inf")
        tiles, _ = self.tiles(config, m)  # with no margin, as `chance`
        return min(
            _log_normal_cdf((1.0 - mu) / sd) if sd > 0 else (0.0 if mu <= 1.0 else float("-inf"))
            for mu, sd in tiles
        )

    def score(self, config: Config) -> tuple[Any, ...]:
        """Fits first, then corrected throughput; what does not fit, by how far over."""
        j = self.judge(config)
        if j is None:
            return (0, float("-inf"))
        return (1, j.worth) if j.fits else (0, -j.load)


def _log_normal_cdf(z: float) -> float:
    """log Phi(z), exact where erfc does not under-flow, else its asymptotic series."""
    if z > -30.0:
        return math.log(0.5 * math.erfc(-z / math.sqrt(2.0)))
    return -0.5 * z * z - math.log(-z) - 0.5 * math.log(2.0 * math.pi) + math.log1p(-1.0 / (z * z))
