"""Single changes that save memory, with the estimated saving ("16.16 saves 340 MB on IPU1")."""

from __future__ import annotations

from .backends.base import format_bytes
from .backends.estimate import estimate
from .models.trace import profile_for
from .problem import Config, Problem
from .rules import violations
from .search.space import SearchSpace
from .warmstart import _alternatives


def _describe(knob: str, before: Config, after: Config) -> str:
    a, b = before.to_dict(), after.to_dict()
    changed = [k for k in a if a[k] != b[k] and k not in ("loss_scaling", "stochastic_rounding", "partials")]
    if not changed:
        changed = [k for k in a if a[k] != b[k]]
    parts = []
    for k in changed[:2]:
        value = b[k]
        if k == "checkpoints":
            value = f"on {len(value)} blocks" if value else "none"
        elif isinstance(value, list):
            value = ", ".join(map(str, value)) if value else "none"
        parts.append(f"{k} {value}")
    return " and ".join(parts) or knob


def suggestions(problem: Problem, config: Config, limit: int = 5) -> list[str]:
    """Changes that most reduce the worst IPU's busiest tile, best first."""
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    base = estimate(problem, config, profile)
    worst = base.worst_ipu() or 0
    base_need = base.max_tile_bytes[worst] * (base.capacity_bytes[worst] // base.tile_capacity_bytes)
    found: dict[str, tuple[float, str]] = {}
    for knob, candidate in _alternatives(space, problem, profile, config):
        if candidate == config or violations(problem, candidate, profile.module_order):
            continue
        m = estimate(problem, candidate, profile)
        if len(m.max_tile_bytes) <= worst:
            continue
        need = m.max_tile_bytes[worst] * (m.capacity_bytes[worst] // m.tile_capacity_bytes)
        saving = base_need - need
        if saving <= 0:
            continue
        speed = ""
        if base.throughput and m.throughput:
            ratio = m.throughput / base.throughput
            speed = f", {ratio:.2f}x throughput" if abs(ratio - 1) > 0.005 else ""
        fits = ", fits" if m.feasible and not base.feasible else ""
        text = f"{_describe(knob, config, candidate)} saves {format_bytes(saving)} on IPU{worst}{fits}{speed}"
        if knob not in found or saving > found[knob][0]:
            found[knob] = (saving, text)
    return [text for _, text in sorted(found.values(), key=lambda t: -t[0])[:limit]]
