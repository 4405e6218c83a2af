"""Hidden IPUs on which whole regions of the space are off: the region family (issue 58).

A draw is a draw of the structural family (random_hidden.RandomHiddenIPU, by the same id)
with a layer on top: a few random *regions*, each a conjunction of two or three
conditions on knobs of the default search space (any knob: a numeric knob below or above
a drawn threshold, a choice in a drawn subset of its values). A config inside a region
has its speed multiplied by the region's factor (log-uniform in 0.5-2x) and one or more
memory categories of its busiest tiles by the region's factors (+-40 %). Regions may
overlap; their factors multiply. The compile noise (+-3 %, fixed per draw and config, as
on every hidden IPU here) stays. So the fastest region is often one the estimator ranks
below others.

Everything is fixed by the draw id, in every process (seeded_random, not hash()), and a
problem's regions are drawn from their own key when that problem is first asked about, so
the order of questions never changes an answer.

The draw ids come in their own two disjoint sets (DRAW_SETS): **develop** to develop
against, **report** only to report, after development. They overlap neither the
structural family's nor the knob-response family's ids.

Like the other hidden IPUs it uses only the estimator's outputs and the Config's fields.
The reported memory breakdown is scaled by the same per-category factors, so the busiest
tile, the breakdown and out-of-memory agree.

Nothing else in the project may read this module's parameters, and the guide's author
must not read this file: it is a test the guide must pass without being tuned to it.
Run `python benchmarks/region_hidden.py` for the share of draws whose best known the
estimator ranks below its own top (a property of the family, not a score of the tuner).
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import seeded_random
from knob_hidden import _unit, knob_domains, knob_values
from random_hidden import RandomHiddenIPU

from ipu_autotune.backends.base import CATEGORIES, Measurement
from ipu_autotune.problem import Config, Problem
from ipu_autotune.search.space import Range

#: draw ids per set, apart from the structural (10000, 20000) and knob (30000, 40000) families'
DRAW_SETS = {"develop": 50_000, "report": 60_000}
#: regions per draw and problem
REGIONS = (4, 8)
#: conditions per region
CONDITIONS = (2, 3)
#: a region's speed factor: log-uniform in this range
SPEED = (0.5, 2.0)
#: a region's memory factor on each category it acts on: uniform in 1 -+ this
MEMORY = 0.4
#: memory categories a region acts on
MEMORY_CATEGORIES = (1, 3)
#: a numeric knob's threshold, as a share of its domain (log-scaled where the knob is)
THRESHOLD = (0.15, 0.85)


@dataclass(frozen=True)
class Condition:
    """One knob's condition: a numeric knob's (mean) value below or above a threshold (as a
    share of its domain), or a choice's value in a subset."""

    knob: str
    threshold: float | None = None
    above: bool = False
    levels: frozenset[str] = frozenset()

    def holds(self, domain: Range | tuple[str, ...], values: list[Any]) -> bool:
        if not values:  # the knob does not apply to this config (no pipeline splits, say)
            return False
        if isinstance(domain, Range):
            u = sum(_unit(v, domain) for v in values) / len(values)
            assert self.threshold is not None  # a numeric knob's condition has one
            return u > self.threshold if self.above else u <= self.threshold
        return all(v in self.levels for v in values)


@dataclass(frozen=True)
class Region:
    conditions: tuple[Condition, ...]
    speed: float
    memory: dict[str, float]  # category -> factor


def _condition(rng: random.Random, knob: str, domain: Range | tuple[str, ...]) -> Condition:
    if isinstance(domain, Range):
        return Condition(knob, threshold=rng.uniform(*THRESHOLD), above=rng.random() < 0.5)
    levels: list[str] = []
    while not 0 < len(levels) < len(domain):  # a proper, non-empty subset
        levels = [v for v in domain if rng.random() < 0.5]
    return Condition(knob, levels=frozenset(levels))


def draw_regions(draw_id: int, problem: Problem) -> list[Region]:
    """One draw's regions on one problem's default search space."""
    domains = knob_domains(problem)
    rng = seeded_random(f"region-hidden-ipu/{draw_id}/{problem.slug}")
    out = []
    for _ in range(rng.randint(*REGIONS)):
        knobs = rng.sample(sorted(domains), rng.randint(*CONDITIONS))
        conditions = tuple(_condition(rng, k, domains[k]) for k in knobs)
        speed = math.exp(rng.uniform(math.log(SPEED[0]), math.log(SPEED[1])))
        categories = rng.sample(CATEGORIES, rng.randint(*MEMORY_CATEGORIES))
        out.append(
            Region(conditions, speed, {c: rng.uniform(1 - MEMORY, 1 + MEMORY) for c in categories})
        )
    return out


#: a region as plain values: its conditions (knob, threshold, above, levels), speed and memory
Described = tuple[list[tuple[str, float | None, bool, list[str]]], float, list[tuple[str, float]]]


def described(regions: list[Region]) -> list[Described]:
    """The regions as plain sorted values (the same text in every process)."""
    return [
        (
            [(c.knob, c.threshold, c.above, sorted(c.levels)) for c in r.conditions],
            r.speed,
            sorted(r.memory.items()),
        )
        for r in regions
    ]


class Regions:
    """One draw's regions on one problem, and which of them a config is in."""

    def __init__(self, draw_id: int, problem: Problem):
        self.problem = problem
        self.domains = knob_domains(problem)
        self.regions = draw_regions(draw_id, problem)
        self._inside: dict[Config, list[Region]] = {}

    def inside(self, config: Config) -> list[Region]:
        if config not in self._inside:
            values = knob_values(self.problem, config)
            self._inside[config] = [
                r
                for r in self.regions
                if all(c.holds(self.domains[c.knob], values[c.knob]) for c in r.conditions)
            ]
        return self._inside[config]

    def speed(self, config: Config) -> float:
        return math.prod(r.speed for r in self.inside(config))

    def memory(self, config: Config, category: str) -> float:
        return math.prod(r.memory.get(category, 1.0) for r in self.inside(config))


class RegionHiddenIPU(RandomHiddenIPU):
    """A structural draw (RandomHiddenIPU) with random regions on top (the module's docstring)."""

    name = "hidden-ipu-regions"

    def __init__(self, seed: int, noise: float = 0.03, spread: float = 0.3):
        super().__init__(seed, noise, spread)
        self._regions: dict[Problem, Regions] = {}

    def regions(self, problem: Problem) -> Regions:
        if problem not in self._regions:
            self._regions[problem] = Regions(self.seed, problem)
        return self._regions[problem]

    def _tiles(self, problem: Problem, config: Config, m: Measurement) -> list[int]:
        tiles = super()._tiles(problem, config, m)
        regions = self.regions(problem)
        out, breakdown = [], []
        for tile, parts in zip(tiles, m.breakdown or [{}] * len(tiles), strict=True):
            factors = {c: regions.memory(config, c) for c in parts}
            total = sum(parts.values())
            mix = sum(v * factors[c] for c, v in parts.items()) / total if total else 1.0
            out.append(int(tile * mix))
            breakdown.append({c: int(v * factors[c]) for c, v in parts.items()})
        if m.breakdown:
            m.breakdown = breakdown
        return out

    def _call(self, problem: Problem, config: Config, m: Measurement) -> tuple[float, float]:
        call, samples = super()._call(problem, config, m)
        return call / self.regions(problem).speed(config), samples


# --- a property of the family: how often the estimator ranks the best known below its top ---


def ranked_below(key: str, draw_id: int, trials: int, kicks: int) -> float | None:
    """The nominal estimator's throughput of the best known (cached_best_known) over its own
    top among its warm starts (5 % headroom, as oracle_walk.py reads it); None: nothing fits."""
    import search_efficiency as se
    from common import DEFAULT_HEADROOM

    from ipu_autotune.backends.estimate import estimate
    from ipu_autotune.guide.warmstart import naive_baseline, proposals
    from ipu_autotune.profiles.trace import profile_for
    from ipu_autotune.search.space import SearchSpace

    problem = se.PROBLEMS[key]
    _, _, best = se.cached_best_known(
        problem, RegionHiddenIPU(draw_id), draw_id, trials, kicks, True
    )
    if best is None:
        return None
    profile, space = profile_for(problem), SearchSpace.load(problem)
    warm = [
        p.config
        for p in proposals(
            problem, profile, space, naive_baseline(problem, profile), headroom=DEFAULT_HEADROOM
        )
    ]
    top = max(
        (
            m.throughput
            for w in warm
            if (m := estimate(problem, w, profile, headroom=DEFAULT_HEADROOM)).feasible
            and m.throughput
        ),
        default=None,
    )
    seen = estimate(problem, best, profile, headroom=DEFAULT_HEADROOM)
    return (seen.throughput or 0.0) / top if top else None


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    import common
    import search_efficiency as se
    from random_hidden import draw_ids

    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(
        description="How often the best known of a region draw is one the nominal "
        "estimator ranks below its own top"
    )
    ap.add_argument("--draws", type=int, default=4, help="develop draws per problem (default 4)")
    ap.add_argument(
        "--problems", nargs="+", choices=sorted(se.PROBLEMS), default=None, metavar="PROBLEM"
    )
    ap.add_argument("--reference-trials", type=int, default=30)
    ap.add_argument("--kicks", type=int, default=20)
    args = ap.parse_args(argv)
    common.quiet_optuna()
    common.header(
        "Region family: the best known against the estimator's ranking", "region_hidden.py", argv
    )
    keys = args.problems or list(se.PROBLEMS)
    ids = draw_ids("develop", args.draws, sets=DRAW_SETS)
    print(
        f"develop draws {ids[0]}-{ids[-1]}, {len(keys)} problem(s); best known: "
        f"search_efficiency.cached_best_known ({args.reference_trials} trials, {args.kicks} "
        "kicks); the estimator's top: the fastest of its warm starts (5 % headroom), as "
        "oracle_walk.py reads it\n",
        flush=True,
    )
    start = time.perf_counter()
    ratios = []
    for k in keys:
        for d in ids:
            r = ranked_below(k, d, args.reference_trials, args.kicks)
            print(
                f"  {k} {d}: "
                + (
                    "no fit"
                    if r is None
                    else f"estimated speed of the best known / the estimator's top {r:.2f}"
                ),
                flush=True,
            )
            if r is not None:
                ratios.append(r)
    if ratios:
        print(
            "\nbest known ranked below the estimator's top: "
            f"{sum(r < 1.0 for r in ratios)}/{len(ratios)} draws with a fit; by more than 5 %: "
            f"{sum(r < 0.95 for r in ratios)}/{len(ratios)}; median ratio "
            f"{common.median(ratios):.2f}"
        )
    else:
        print("\nno draw with a fit")
    print(f"\nwall time: {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
