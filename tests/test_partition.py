"""Pipeline partitions over per-unit costs."""

import itertools
from typing import Any

from hypothesis import given, settings, strategies as st

from ipu_autotune.models import partition


def stage_costs(costs: Any, cuts: Any) -> Any:
    bounds = [0, *cuts, len(costs)]
    return [sum(costs[a:b]) for a, b in itertools.pairwise(bounds)]


def brute_force(costs: Any, parts: Any) -> Any:
    n = len(costs)
    return min(
        max(stage_costs(costs, cuts)) for cuts in itertools.combinations(range(1, n), parts - 1)
    )


@given(st.lists(st.integers(1, 50), min_size=2, max_size=9), st.integers(2, 4))
@settings(max_examples=150, deadline=None)
def test_balanced_is_optimal(costs: Any, parts: Any) -> None:
    parts = min(parts, len(costs))
    cuts = partition.balanced(costs, parts)
    assert (
        len(cuts) == parts - 1
        and cuts == sorted(set(cuts))
        and 0 < cuts[0]
        and cuts[-1] < len(costs)
    )
    assert max(stage_costs(costs, cuts)) == brute_force(costs, parts)


def test_every_partition_is_reachable_and_valid() -> None:
    units, parts = 7, 3
    reached = set()
    for raw in itertools.product(range(1, units - parts + 2), repeat=parts - 1):
        cuts = partition.decode(list(raw))
        assert all(0 < a < b < units for a, b in itertools.pairwise(cuts)) and cuts[-1] < units
        reached.add(tuple(cuts))
    assert reached == set(itertools.combinations(range(1, units), parts - 1))


def test_encode_inverts_decode() -> None:
    for cuts in itertools.combinations(range(1, 10), 3):
        assert partition.decode(partition.encode(list(cuts))) == list(cuts)


def test_by_count_splits_evenly() -> None:
    assert partition.by_count(35, 2) == [18]
    assert partition.by_count(8, 4) == [2, 4, 6]


def test_shifted_cuts_move_every_boundary_together() -> None:
    # four stages over 12 units: stages of 3; a shift moves work between the first and last
    # stages and keeps the middle ones' sizes (BERT's embeddings sit in the first)
    assert partition.shifted_cuts([3, 6, 9], 12, (-2, -1, 1, 2)) == [
        [1, 4, 7],
        [2, 5, 8],
        [4, 7, 10],
        [5, 8, 11],
    ]
    assert partition.shifted_cuts([1, 6, 9], 12, (-1, 1)) == [
        [2, 7, 10]
    ]  # the first stage keeps a unit
    assert partition.shifted_cuts([6], 12, (-1, 1)) == []  # one boundary: moved_cuts has it
