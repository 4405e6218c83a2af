"""Single changes that save memory, each the whole suggested configuration re-estimated.

A suggestion's claims (the saving, the verdict, the throughput ratio) all come from
estimating the configuration it proposes, never from one IPU's delta: a split that relieves
IPU3 by overloading IPU2 says so ("saves 120 MB on the busiest IPU (now IPU2), still OOM by
611 MB on IPU2").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..backends.estimate import EstimateBackend
from ..measurement import Measurement, format_bytes
from ..problem import Config, Problem
from ..profiles.trace import ModelProfile, profile_for
from ..rules.cross_field import recipe_violations, violations
from ..search.replay import checkpoint_spacing
from ..search.space import SearchSpace
from .single_changes import single_changes


@dataclass(frozen=True)
class Suggestion:
    knob: str
    config: Config  # the whole suggested configuration
    measurement: Measurement  # its estimate: every claim below is read from it
    saving: int  # bytes: the busiest IPU's need before, less the busiest IPU's need after
    text: str


def busiest_need(m: Measurement) -> int:
    """What the busiest IPU needs if every tile were as full as its busiest one (bytes)."""
    if not m.max_tile_bytes or not m.tile_capacity_bytes:
        return 0
    return max(m.max_tile_bytes) * (m.capacity_bytes[0] // m.tile_capacity_bytes)


def _value(key: str, config: Config, profile: ModelProfile) -> object:
    value = config.to_dict(every_field=True)[key]
    if key == "checkpoints":
        every = checkpoint_spacing(profile, config)
        if not value:
            return "none"
        return (
            f"every {every} blocks"
            if every and every > 1
            else "every block"
            if every
            else f"on {len(value)} blocks"
        )
    if isinstance(value, bool):
        return str(value).lower()  # as --set and the config file write it
    if key == "available_memory_proportion" and len(set(value)) == 1 and len(value) > 1:
        return f"{value[0]} on every IPU"
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "none"
    return value


def describe(before: Config, after: Config, profile: ModelProfile) -> str:
    """Every field the suggested configuration changes: applying them gives exactly it."""
    a, b = before.to_dict(every_field=True), after.to_dict(every_field=True)
    changed = [k for k in a if a[k] != b[k]]
    return ", ".join(f"{k} {_value(k, after, profile)}" for k in changed)


def _text(change: str, base: Measurement, m: Measurement, saving: int) -> str:
    before_ipu, after_ipu = base.worst_ipu() or 0, m.worst_ipu() or 0
    moved = f" (now IPU{after_ipu})" if after_ipu != before_ipu else ""
    verdict = (
        ", fits"
        if m.feasible and not base.feasible
        else ""
        if m.feasible
        else f", still {m.verdict()}"
    )
    speed = ""
    if base.throughput and m.throughput:
        ratio = m.throughput / base.throughput
        speed = f", {ratio:.2f}x throughput" if abs(ratio - 1) > 0.005 else ""
    return f"{change}: saves {format_bytes(saving)} on the busiest IPU{moved}{verdict}{speed}"


def suggestions(
    problem: Problem,
    config: Config,
    limit: int = 5,
    measure: Callable[[Problem, Config], Measurement] | None = None,
    numerics: Callable[[Config], Config] | None = None,
) -> list[Suggestion]:
    """Changes that most reduce the busiest IPU's need, best first, each re-estimated whole
    with `measure` (the estimate backend by default). Candidates must pass every rule the
    configuration itself passes: a recipe rule it already breaks does not hide the advice.
    A change of precision takes its loss scaling, stochastic rounding and partials from
    `numerics`: the advice tune applies (numerics/advice.py), not the precision move's defaults."""
    measure = measure or EstimateBackend().measure
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    base = measure(problem, config)
    base_need = busiest_need(base)
    already = set(recipe_violations(problem, config))
    found: dict[str, Suggestion] = {}
    for knob, candidate in single_changes(space, problem, profile, config):
        if numerics is not None and candidate.precision != config.precision:
            candidate = numerics(candidate)
        if candidate == config:
            continue
        if (
            violations(problem, candidate, profile.module_order, recipe=False)
            or set(recipe_violations(problem, candidate)) - already
        ):
            continue
        m = measure(problem, candidate)
        saving = base_need - busiest_need(m)
        if saving <= 0 or len(m.max_tile_bytes) != len(m.capacity_bytes):
            continue
        if knob not in found or saving > found[knob].saving:
            text = _text(describe(config, candidate, profile), base, m, saving)
            found[knob] = Suggestion(knob, candidate, m, saving, text)
    return sorted(found.values(), key=lambda s: -s.saving)[:limit]
