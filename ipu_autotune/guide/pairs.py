"""Pair moves: two single-knob changes of one config, applied together.

The guide's climbs try pairs when no single change helps (recomputation and accumulation,
say, must often move together); which pairs differs (the best single changes with each
other, or the fastest with the leanest), the merge and the choice do not.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from ..problem import Config


class Scored(Protocol):
    """What best_pair reads of a model: guide/corrected.CorrectedModel.score."""

    def score(self, config: Config) -> tuple[Any, ...]: ...


def changes(base: Config, c: Config) -> dict[str, Any]:
    """The fields of `c` that differ from `base`, with their values in `c`."""
    return {
        f: getattr(c, f) for f in base.__dataclass_fields__ if getattr(base, f) != getattr(c, f)
    }


def merged(base: Config, a: Config, b: Config) -> Config | None:
    """`base` with the changes of both `a` and `b`; None where they change the same knob."""
    da, db = changes(base, a), changes(base, b)
    if da.keys() & db.keys():
        return None
    return base.replace(**da, **db)


def best_pair(
    model: Scored, base: Config, pairs: Iterable[tuple[Config, Config]]
) -> Config | None:
    """The merged pair scoring highest under `model.score`, if any scores above `base`
    (the first of equal scores)."""
    top, top_score = None, model.score(base)
    for a, b in pairs:
        c = merged(base, a, b)
        if c is not None and model.score(c) > top_score:
            top, top_score = c, model.score(c)
    return top
