"""How fast any number of compile workers could get within 5 % of the best known.

A compile's simulated minutes (common.compile_minutes) depend on two things only: the ops on
the busiest IPU (IPUs per replica) and whether the forward is recomputed. So the configs of a
problem fall into a few *compile classes*, each with one compile time. However many workers
run, time to within 5 % cannot be less than one compile of the fastest-compiling class that
holds a config within 5 % of the best known. Over the time `--jobs 1` needed, that is the
*reachable floor*: where it is above 0.4x, `--jobs 4 <= 0.4x --jobs 1` is out of reach for
any tuner (the serial tuner was too quick for four workers to be 2.5 times quicker).

Each class's best is searched on the hidden IPU itself, restricted to the class: greedy
ascents (ascent.polish) from every start the reference search uses and their
single changes that land in the class, then random kicks from the class's best. A class
search can miss its best, which only makes the floor higher than it is; configs that
benchmarked runs compiled within 5 % count too. Cached beside the best-known searches.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from typing import Any

import common
from ascent import OracleScreen, kicked, polish
from common import REFERENCE_CACHE, compile_minutes

from ipu_autotune.guide.single_changes import single_changes
from ipu_autotune.guide.warmstart import naive_baseline, proposals, screen_rank
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace

#: greedy ascents per class (from its best starts); random kicks from the class's best are a
#: third of the best-known search's
CLASS_STARTS = 6


def compile_class(problem: Problem, config: Config) -> float:
    """A class is its compile time (what common.compile_minutes depends on)."""
    return round(compile_minutes(problem, config), 4)


def class_bests(
    problem: Problem, oracle: Any, seed: int, reference: Config | None, kicks: int
) -> dict[float, tuple[float, Config]]:
    """Per compile class: (best hidden-IPU throughput found in it, config)."""
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    baseline = naive_baseline(problem, profile)
    seeds = [baseline] + [
        m for k, m in single_changes(space, problem, profile, baseline) if k == "ipus_per_replica"
    ]
    seeds += [
        p.config for p in proposals(problem, profile, space, baseline, constants=oracle.constants)
    ]
    seeds += [p.config for p in proposals(problem, profile, space, baseline)]
    if reference is not None:
        seeds.append(reference)
    starts = list(
        dict.fromkeys(
            seeds
            + [
                c
                for s in dict.fromkeys(seeds)
                for _, c in single_changes(space, problem, profile, s)
            ]
        )
    )
    full = OracleScreen(problem, profile, oracle, space)

    class Restricted(OracleScreen):
        def __init__(self, want: float) -> None:
            super().__init__(problem, profile, oracle, space)
            self.cache, self.want = full.cache, want  # answers shared; the class filters

        def __call__(self, config: Any) -> Any:
            return (
                super().__call__(config) if compile_class(problem, config) == self.want else None
            )

    out: dict[float, tuple[float, Config]] = {}
    for want in sorted({compile_class(problem, s) for s in starts}):
        screen = Restricted(want)
        mine = sorted(
            (s for s in starts if compile_class(problem, s) == want),
            key=lambda c: screen_rank(screen(c)),
            reverse=True,
        )[:CLASS_STARTS]
        best = max(
            (polish(screen, space, s, rounds=25) for s in mine),
            key=lambda c: screen_rank(screen(c)),
        )
        best = kicked(
            screen,
            space,
            best,
            common.seeded_random(f"class/{problem.slug}/{seed}/{want}"),
            kicks,
            (2, 3),
            rounds=10,
        )
        m = screen(best)
        if m is not None and m.feasible:
            out[want] = (m.throughput, best)
    return out


def cached_class_bests(
    problem: Problem,
    oracle: Any,
    seed: int,
    reference: Config | None,
    kicks: int,
    reference_key: str,
    use_cache: bool = True,
) -> dict[float, float]:
    """class_bests' throughputs, kept on disk beside the best-known search (its key, which holds
    the searches' version: common.REFERENCE_SEARCH_VERSION covers class_bests too)."""
    # what the reference measures now: reference_key alone can miss a change to speed
    # (search_efficiency.cached_best_known), and the bests here were measured with it
    measured = oracle.evaluate(problem, reference).throughput if reference is not None else None
    key = hashlib.sha256(
        f"{reference_key}/{measured!r}/{CLASS_STARTS}/{kicks}".encode()
    ).hexdigest()[:24]
    path = REFERENCE_CACHE / f"classes-{problem.slug}-{type(oracle).__name__}-{seed}-{kicks}.json"
    if use_cache and path.exists():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            data = json.loads(path.read_text())
            if data["key"] == key:
                return {float(k): v for k, v in data["bests"].items()}
    bests = {k: t for k, (t, _) in class_bests(problem, oracle, seed, reference, kicks).items()}
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": key, "bests": {str(k): v for k, v in bests.items()}}))
    return bests


def reachable_minutes(
    bests: dict[float, float], runs: dict[str, Any], reference: float, near: float
) -> float:
    """The fewest minutes one compile within `near` of `reference` takes: the fastest class
    whose best is that good, or a config a benchmarked run compiled that good."""
    found = [minutes for minutes, t in bests.items() if t >= near * reference]
    for run in runs.values():
        durations = run.get("durations") or []
        if not durations:  # a strategy the simulated workers did not run: no compile's minutes
            continue
        found += [
            d
            for t, d in zip(run.get("compiles") or [], durations, strict=True)
            if t and t >= near * reference
        ]
    return min(found, default=math.inf)
