"""Greedy ascents on a hidden IPU, for the best-known and compile-class searches.

`polish` climbs from a config by single-knob moves (pairs of them when no single one helps);
`kicked` is an iterated local search over it. search_efficiency.best_known and
reachable_floor.class_bests both use them. The reference caches (benchmarks/reference) key
on common.REFERENCE_SEARCH_VERSION, not on this code's text: a change that could change what
these climbs find bumps it (and the references are searched again); a renaming does not.
"""

from __future__ import annotations

from typing import Any

from common import HiddenIPU

from ipu_autotune.guide.single_changes import single_changes
from ipu_autotune.guide.warmstart import Screen, screen_rank
from ipu_autotune.models import partition
from ipu_autotune.problem import Config, Problem
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.knobs import Choice, Range
from ipu_autotune.search.space import SearchSpace


class OracleScreen(Screen):
    """A warmstart.Screen whose every answer comes from the hidden IPU (for reference climbs).

    Only configs inside the search space count: the tuner searches that space (Runner.config_for
    projects every trial into it), so a best known outside it (hand-placed recomputation
    checkpoints, say) would be a target no tuner run can reach."""

    def __init__(
        self, problem: Problem, profile: Any, oracle: HiddenIPU, space: SearchSpace
    ) -> None:
        super().__init__(problem, profile, oracle.constants, space=space)
        self.oracle = oracle

    def __call__(self, config: Any) -> Any:
        if config not in self.cache:
            assert self.space is not None  # __init__ gives one
            ok = not violations(self.problem, config, self.profile.module_order)
            ok = ok and not self.space.outside(self.problem, self.profile, config)
            self.cache[config] = self.oracle.evaluate(self.problem, config) if ok else None
        return self.cache[config]


def knob_changes(a: Config, b: Config) -> dict[str, Any]:
    return {f: getattr(b, f) for f in a.__dataclass_fields__ if getattr(a, f) != getattr(b, f)}


def single_moves(space: SearchSpace, screen: Screen, c: Config) -> list[Config]:
    """warmstart's single-knob changes (same IPU layout), plus what it leaves out: I/O tiles,
    every available-memory-proportion step, per-IPU proportions and one-block split moves."""
    problem, profile = screen.problem, screen.profile
    out = [
        cand
        for knob, cand in single_changes(space, problem, profile, c)
        if knob != "ipus_per_replica"
    ]
    io_tiles, amp = space.knobs["io_tiles"], space.knobs["available_memory_proportion"]
    assert isinstance(io_tiles, Choice) and isinstance(amp, Range) and amp.step is not None
    if not c.pipelined:
        for tiles in io_tiles.values:
            if tiles != c.io_tiles:
                out.append(
                    c.replace(io_tiles=tiles, execution="sharded" if tiles else c.execution)
                )
    grid = [
        round(amp.low + i * amp.step, 4)
        for i in range(int((amp.high - amp.low) / amp.step + 1e-9) + 1)
    ]
    for a in grid:
        out.append(c.replace(available_memory_proportion=(a,) * c.ipus_per_replica))
    for i, a in enumerate(c.available_memory_proportion):
        for step in (-amp.step, amp.step):
            v = round(a + step, 4)
            if amp.low - 1e-9 <= v <= amp.high + 1e-9:
                amps = list(c.available_memory_proportion)
                amps[i] = v
                out.append(c.replace(available_memory_proportion=tuple(amps)))
    index = {u.path: i for i, u in enumerate(profile.units)}
    cuts = [index[p] for p in c.splits if p in index]
    if len(cuts) == len(c.splits):
        for moved in partition.moved_cuts(cuts, len(profile.units), (-2, -1, 1, 2)):
            out.append(
                c.replace(splits=tuple(profile.units[x].path for x in moved), checkpoints=())
            )
    return [x for x in dict.fromkeys(out) if x != c]


def polish(
    screen: Screen, space: SearchSpace, start: Config, rounds: int = 40, pairs: bool = True
) -> Config:
    """Greedy ascent for the reference: single-knob moves, and when none improves, every
    pair of them (recompute and offload, say, must often change together to stay fitting)."""
    best, score = start, screen_rank(screen(start))
    for _ in range(rounds):
        singles = single_moves(space, screen, best)
        moves = [(screen_rank(screen(c)), c) for c in singles]
        top = max(moves, key=lambda t: t[0], default=None)
        if (top is None or top[0] <= score) and pairs:
            diffs = [knob_changes(best, c) for c in singles]
            moves = []
            for i in range(len(diffs)):
                for j in range(i + 1, len(diffs)):
                    if diffs[i].keys() & diffs[j].keys():
                        continue
                    c = best.replace(**diffs[i], **diffs[j])
                    moves.append((screen_rank(screen(c)), c))
            top = max(moves, key=lambda t: t[0], default=None)
        if top is None or top[0] <= score:
            break
        score, best = top
    return best


def kicked(
    screen: Screen,
    space: SearchSpace,
    start: Config,
    rng: Any,
    kicks: int,
    sizes: tuple[int, ...],
    rounds: int = 40,
) -> Config:
    """An iterated local search: `kicks` times, a random number (from `sizes`) of random
    single-knob moves from the best so far, then a greedy single-knob ascent; kept when better."""
    for _ in range(kicks):
        c = start
        for _ in range(rng.choice(sizes)):
            c = rng.choice(single_moves(space, screen, c) or [c])
        c = polish(screen, space, c, rounds=rounds, pairs=False)
        if screen_rank(screen(c)) > screen_rank(screen(start)):
            start = c
    return start
