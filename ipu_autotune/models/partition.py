"""Pipeline partitions as plain functions over per-unit costs (after torchgpipe.balance).

A partition of C units into N stages is given by N-1 boundaries 0 < b1 < ... < b(N-1) < C:
stage k holds units [b(k), b(k+1)).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise


def by_count(units: int, parts: int) -> list[int]:
    """What a newcomer writes: the same number of blocks on every IPU."""
    return [round(k * units / parts) for k in range(1, parts)]


def balanced(costs: Sequence[float], parts: int) -> list[int]:
    """Boundaries minimising the costliest stage (exact dynamic programme, O(parts x C^2))."""
    n = len(costs)
    if parts <= 1:
        return []
    if parts > n:
        raise ValueError(f"cannot split {n} units into {parts} stages")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # worst[k][i]: smallest possible costliest stage when units [0, i) form k stages.
    worst = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    worst[0][0] = 0.0
    for k in range(1, parts + 1):
        for i in range(k, n - (parts - k) + 1):
            for j in range(k - 1, i):
                value = max(worst[k - 1][j], prefix[i] - prefix[j])
                if value < worst[k][i]:
                    worst[k][i], cut[k][i] = value, j
    cuts, i = [], n
    for k in range(parts, 1, -1):
        i = cut[k][i]
        cuts.append(i)
    return sorted(cuts)


def moved_cuts(cuts: Sequence[int], units: int, steps: Sequence[int]) -> list[list[int]]:
    """Each boundary moved alone by each step (boundary by boundary, in `steps` order), where
    every stage keeps at least one unit."""
    out = []
    for k in range(len(cuts)):
        for step in steps:
            moved = list(cuts)
            moved[k] += step
            bounds = [0, *moved, units]
            if all(a < b for a, b in pairwise(bounds)):
                out.append(moved)
    return out


def shifted_cuts(cuts: Sequence[int], units: int, steps: Sequence[int]) -> list[list[int]]:
    """Every boundary moved together by each step, where every stage keeps at least one unit
    (more than one boundary: with one, moved_cuts has it)."""
    out = []
    for step in steps if len(cuts) > 1 else ():
        moved = [b + step for b in cuts]
        bounds = [0, *moved, units]
        if all(a < b for a, b in pairwise(bounds)):
            out.append(moved)
    return out


def encode(cuts: Sequence[int]) -> list[int]:
    """Boundaries -> non-decreasing integers in [1, C-N+1] (stars and bars).

    Sampling N-1 integers from that range independently and decoding them reaches every
    valid partition and never an invalid one.
    """
    return [b - i for i, b in enumerate(cuts)]


def decode(raw: Sequence[int]) -> list[int]:
    return [r + i for i, r in enumerate(sorted(raw))]
