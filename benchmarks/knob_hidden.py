"""Hidden IPUs on which every knob acts in its own way: the knob-response family (issue 41).

A draw is a draw of the structural family (random_hidden.RandomHiddenIPU, by the same id)
with a layer on top: every knob of the default search space has its own smooth random
effect on device time, on host time and on each memory category of the busiest tile,
over its whole domain (any sign, not necessarily monotone, at most 30 % either way), and
a few random pairwise interactions. Numeric knobs act as smooth functions of their value
normalised to their domain; choices act as one random level per value. Everything is
fixed by the draw id, in every process, and drawn lazily per (target, knob, value), so
the order of questions never changes an answer.

The draw ids come in their own two disjoint sets (DRAW_SETS): **develop** to develop
against, **report** only to report, after development. They do not overlap the
structural family's ids, so the structural layer of a draw here is one nobody has
developed on either.

Like the other hidden IPUs it uses only the estimator's outputs and the Config's fields.
The reported memory breakdown is scaled by the same per-category factors, as a real
profile would show them.

Nothing else in the project may read this module's parameters: it is a test the guide
must pass without being tuned to it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any, cast

from common import seeded_random
from random_hidden import RandomHiddenIPU

from ipu_autotune.backends.base import CATEGORIES, Measurement
from ipu_autotune.host import pipeline as host
from ipu_autotune.problem import Config, Problem, effective_recompute
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.knobs import Choice
from ipu_autotune.search.space import Range, SearchSpace

#: draw ids per set, apart from the structural family's (random_hidden.DRAW_SETS)
DRAW_SETS = {"develop": 30_000, "report": 40_000}
#: what a knob's response acts on: device time, host time, each memory category
TARGETS = ("device", "host") + tuple(f"memory:{c}" for c in CATEGORIES)
#: the largest effect of one knob on one target, as a fraction either way: STRONG of the
#: knobs (drawn per target) in STRONG_RANGE, the rest in MILD_RANGE, so which knobs matter
#: differs per draw and target, and twenty knobs at once do not multiply to a factor of 5
STRONG, STRONG_RANGE, MILD_RANGE = 0.2, (0.10, 0.30), (0.01, 0.05)
#: the largest effect of an interaction, either way
MOST = 0.30
#: interactions per draw
INTERACTIONS = (1, 3)
#: knobs the Config holds as structure, not as a space value: a share of the model's units
UNIT_SHARES = ("checkpoints", "splits")
#: search-space knobs that are not Config fields (checkpoint_every is read as `checkpoints`)
NOT_FIELDS = ("checkpoint_every",)
_GRID = [i / 100 for i in range(101)]


def _unit(value: float, knob: Range) -> float:
    low, high = knob.low, knob.high
    if knob.log:
        value, low, high = math.log(max(value, low)), math.log(low), math.log(high)
    return min(1.0, max(0.0, (value - low) / (high - low))) if high > low else 0.0


def _legendre(u: float) -> tuple[float, float, float]:
    """P1, P2, P3 on [0, 1]: each averages zero over the domain, so a response moves speed
    or memory between values without shifting the mean."""
    x = 2.0 * u - 1.0
    return x, (3 * x * x - 1) / 2, (5 * x**3 - 3 * x) / 2


def _curve(rng: random.Random, amplitude: float) -> Callable[[float], float]:
    """A random low-order curve on [0, 1] whose largest |value| is `amplitude`."""
    c = [rng.gauss(0.0, 1.0) / (k + 1) for k in range(3)]

    def raw(u: float) -> float:
        return sum(a * p for a, p in zip(c, _legendre(u), strict=True))

    scale = amplitude / (max(abs(raw(u)) for u in _GRID) or 1.0)
    return lambda u: scale * raw(u)


def _levels(rng: random.Random, values: tuple[str, ...], amplitude: float) -> dict[str, float]:
    """One random level per value, centred over the domain, the largest |level| `amplitude`."""
    raw = [rng.uniform(-1.0, 1.0) for _ in values]
    mean = sum(raw) / len(raw)
    spread = max(abs(r - mean) for r in raw) or 1.0
    return {v: amplitude * (r - mean) / spread for v, r in zip(values, raw, strict=True)}


def knob_domains(problem: Problem) -> dict[str, Range | tuple[str, ...]]:
    """The default search space's domain of every knob that varies for `problem`: a Range
    (numeric) or the level names of a choice. A knob with one value has no effect."""
    space, profile = SearchSpace.load(problem), profile_for(problem)
    layouts = space.ipu_layouts(problem, profile)
    recompute = cast(Choice, space.knobs["recompute"]).values  # a choice in every space
    out: dict[str, Range | tuple[str, ...]] = {
        "ipus_per_replica": tuple(str(i) for i in sorted({i for i, _ in layouts})),
        "replicas": tuple(str(r) for r in sorted({r for _, r in layouts})),
        "recompute": tuple(
            sorted({effective_recompute(m, p) for m in recompute for p in (False, True)})
        ),
        "micro_batch": tuple(str(m) for m in space.micro_batches(problem)),
        **{k: Range(0.0, 1.0) for k in UNIT_SHARES},
    }
    for name, knob in space.knobs.items():
        if name not in out and name not in NOT_FIELDS:
            out[name] = knob if isinstance(knob, Range) else tuple(str(v) for v in knob.values)
    return {k: v for k, v in out.items() if isinstance(v, Range) or len(v) > 1}


def knob_values(problem: Problem, config: Config) -> dict[str, list[Any]]:
    """Each knob's value(s) as the domains name them: a level name, or numbers (one per IPU
    for the memory proportion, one per split); unit shares as a fraction of the model."""
    units = {u.path: i for i, u in enumerate(profile_for(problem).units)}
    out: dict[str, list[Any]] = {f.name: [str(getattr(config, f.name))] for f in fields(Config)}
    for name in ("gradient_accumulation", "device_iterations"):
        out[name] = [getattr(config, name)]
    out["available_memory_proportion"] = list(config.available_memory_proportion)
    out["recompute"] = [config.effective_recompute]
    out["micro_batch"] = [str(config.micro_batch or problem.batch_size)]
    out["checkpoints"] = [len(config.checkpoints) / max(1, len(units))]
    out["splits"] = [units[s] / max(1, len(units)) for s in config.splits if s in units]
    return out


class KnobResponse:
    """One draw's knob responses and interactions on one problem (the module's docstring)."""

    def __init__(self, draw_id: int, problem: Problem):
        self.key = f"knob-response/{draw_id}"
        self.problem = problem
        self.domains = knob_domains(problem)
        rng = seeded_random(f"{self.key}/{problem.slug}/interactions")
        pairs: set[tuple[str, ...]]
        count, pairs = rng.randint(*INTERACTIONS), set()
        while len(pairs) < count:
            pairs.add(tuple(sorted(rng.sample(sorted(self.domains), 2))))
        self.pairs = sorted(pairs)
        self._terms: dict[tuple[object, ...], Any] = {}
        self._strengths = {
            (pair, t): seeded_random(
                "/".join(map(str, (self.key, problem.slug, pair, t)))
            ).uniform(-MOST, MOST)
            for pair in self.pairs
            for t in TARGETS
        }
        self._values: tuple[Config | None, dict[str, list[Any]]] = (None, {})

    def term(self, *where: object) -> Any:
        """A knob's response named by `where` (target, knob[, IPU]): a curve on [0, 1] or
        levels per value; its largest |effect| is drawn (STRONG)."""
        if where not in self._terms:
            rng = seeded_random("/".join(map(str, (self.key, self.problem.slug) + where)))
            amplitude = rng.uniform(*(STRONG_RANGE if rng.random() < STRONG else MILD_RANGE))
            if where[0] == "pair":  # a knob's shape in an interaction: [-1, 1]
                amplitude = 1.0
            knob = cast(str, where[1] if where[0] != "pair" else where[2])  # a knob's name
            domain = self.domains[knob]
            self._terms[where] = (
                _curve(rng, amplitude)
                if isinstance(domain, Range)
                else _levels(rng, domain, amplitude)
            )
        return self._terms[where]

    def effect(self, knob: str, values: list[Any], *where: object) -> float:
        """`knob`'s effect named by `where` at its `values`, averaged over them (per IPU or
        per split); 0 for a value outside the domain or none at all."""
        if not values:
            return 0.0
        domain, term = self.domains[knob], self.term(*where)
        each: list[float] = (
            [term(_unit(v, domain)) for v in values]
            if isinstance(domain, Range)
            else [term.get(v, 0.0) for v in values]
        )
        return sum(each) / len(each)

    def factor(self, target: str, config: Config, ipu: int | None = None) -> float:
        """What `target` is multiplied by for `config`: the product over knobs and
        interactions of (1 + effect). `ipu`: the memory of that IPU, which its own available
        memory proportion acts on (None: each IPU's own response, averaged)."""
        if self._values[0] != config:  # asked once per target and IPU: read the config once
            self._values = (config, knob_values(self.problem, config))
        values = self._values[1]
        out = 1.0
        for knob in self.domains:
            if knob == "available_memory_proportion":
                amp = values[knob]
                each = [self.effect(knob, [a], target, knob, i) for i, a in enumerate(amp)]
                out *= 1.0 + (
                    each[min(ipu, len(each) - 1)] if ipu is not None else sum(each) / len(each)
                )
            else:
                out *= 1.0 + self.effect(knob, values[knob], target, knob)
        for a, b in self.pairs:
            shapes = self.effect(a, values[a], "pair", (a, b), a) * self.effect(
                b, values[b], "pair", (a, b), b
            )
            out *= 1.0 + self._strengths[((a, b), target)] * shapes
        return out


class KnobResponseHiddenIPU(RandomHiddenIPU):
    """A structural draw (RandomHiddenIPU) with every knob's own response on top."""

    name = "hidden-ipu-knobs"

    def __init__(self, seed: int, noise: float = 0.03, spread: float = 0.3):
        super().__init__(seed, noise, spread)
        self._responses: dict[Problem, KnobResponse] = {}

    def response(self, problem: Problem) -> KnobResponse:
        """This IPU's knob responses over `problem`'s search space."""
        if problem not in self._responses:
            self._responses[problem] = KnobResponse(self.seed, problem)
        return self._responses[problem]

    def _tiles(self, problem: Problem, config: Config, m: Measurement) -> list[int]:
        tiles = super()._tiles(problem, config, m)
        response = self.response(problem)
        out, breakdown = [], []
        for i, (tile, parts) in enumerate(
            zip(tiles, m.breakdown or [{}] * len(tiles), strict=True)
        ):
            factors = {c: response.factor(f"memory:{c}", config, ipu=i) for c in parts}
            total = sum(parts.values())
            mix = sum(v * factors[c] for c, v in parts.items()) / total if total else 1.0
            out.append(int(tile * mix))
            breakdown.append({c: int(v * factors[c]) for c, v in parts.items()})
        if m.breakdown:
            m.breakdown = breakdown
        return out

    def _device_parts(self, problem: Problem, config: Config, m: Measurement) -> dict[str, float]:
        parts = super()._device_parts(problem, config, m)
        slower = self.response(problem).factor("device", config)
        return {k: v if k == "host call" else v * slower for k, v in parts.items()}

    def _host_costs(self, problem: Problem, config: Config) -> host.HostCosts:
        costs = super()._host_costs(problem, config)
        slower = self.response(problem).factor("host", config)
        return replace(
            costs,
            float_sample_s=costs.float_sample_s * slower,
            uint8_sample_s=costs.uint8_sample_s * slower,
            call_s=costs.call_s * slower,
        )
