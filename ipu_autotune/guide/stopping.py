"""The guide's stopping rule: more compiles are unlikely to pay when no untried candidate is
expected to gain STOP_GAIN on the best measured and STOP_PATIENCE compiles in a row did not
beat the best by as much (guide/guide.py judges the first, `compiles_since_best` counts the
second)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: the stopping rule: no untried candidate is expected to gain this much on the best measured
#: (a fraction of it), and STOP_PATIENCE compiles in a row did not beat the best by as much
STOP_GAIN = 0.01
STOP_PATIENCE = 3


@dataclass(frozen=True)
class Stop:
    """The stopping rule, once it applies: more compiles are unlikely to pay."""

    compiles_since_best: int  # compiles that did not beat the best by STOP_GAIN
    expected_gain: (
        float  # the largest expected gain of an untried candidate, a fraction of the best
    )
    compiles_ran: int  # compiles whose speed corrected the estimator

    def __str__(self) -> str:
        return (
            f"the last {self.compiles_since_best} compiles did not beat the best by "
            f"{STOP_GAIN:.0%}, and the largest expected gain of an untried candidate is "
            f"{self.expected_gain:.2%} of the best (the estimator corrected by "
            f"{self.compiles_ran} compile(s) that ran): further compiles are unlikely to pay"
        )


def compiles_since_best(measured: Sequence[Any]) -> int:
    """Compiles (fitting or out of memory) since the last one that beat the best before it by
    STOP_GAIN."""
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
