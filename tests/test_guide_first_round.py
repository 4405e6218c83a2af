"""The first round, before any compile has returned: bets weighed by the round's expected
best (guide/blind.py), over each layout's speed-memory frontier; split moves that carry a
recomputing config's checkpoints with them."""

import pytest

from ipu_autotune.guide.apart import layout
from ipu_autotune.guide.blind import BlindRound
from ipu_autotune.guide.warmstart import Screen, naive_baseline
from ipu_autotune.problem import Problem
from ipu_autotune.profiles.placement import checkpoints_every
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.replay import checkpoint_spacing
from ipu_autotune.search.space import SearchSpace

PIPELINE, SHARDED = (2, 1, "pipelined"), (2, 1, "sharded")


def test_a_lean_bet_in_another_layout_adds_more_than_a_second_bet_at_the_same_edge() -> None:
    """A running bet at 0.90 of a tile runs out wherever the IPU holds more than the estimate
    by about 11 %; a second bet at 0.85 in its layout runs out in most of those draws too, a
    bet at 0.75 in another layout, though 40 % slower, fits in most of them (ResNet-152,
    structural hand-made IPU: four pipelines at 0.83-0.94 ran out together)."""
    rnd = BlindRound()
    running = rnd.outcomes(PIPELINE, 0.90, 1000.0)
    second = rnd.worth([running, rnd.outcomes(PIPELINE, 0.85, 990.0)])
    lean = rnd.worth([running, rnd.outcomes(SHARDED, 0.75, 600.0)])
    alone = rnd.worth([running])
    assert lean > second > alone
    # a copy of the running bet adds nothing
    assert rnd.worth([running, rnd.outcomes(PIPELINE, 0.90, 1000.0)]) == pytest.approx(alone)


def test_alone_a_bet_is_worth_its_chance_to_fit_times_its_speed() -> None:
    rnd = BlindRound(draws=4000)
    fits = sum(1 for v in rnd.outcomes(SHARDED, 0.8, 500.0) if v > 0) / 4000
    assert 0.7 < fits < 0.9  # log(1 / 0.8) = 0.22 against a spread of about 0.28
    assert rnd.worth([rnd.outcomes(SHARDED, 0.8, 500.0)]) == pytest.approx(fits * 500.0, rel=0.05)
    # the same draws in every process: the same round
    assert BlindRound().outcomes(SHARDED, 0.8, 500.0) == BlindRound().outcomes(SHARDED, 0.8, 500.0)


def test_a_split_move_of_a_recomputing_config_carries_its_checkpoints() -> None:
    """Moving a stage boundary moves the stages' recomputation checkpoints with it; kept
    where they were, the space rejects the move, and a recomputing config's memory could
    not be balanced between its IPUs (ResNet-152's sharded model within 5 % of the best known
    needs its split a few layers earlier and accumulation 128: from the split a climb at
    accumulation 1 chose, no single or paired change of the old moves got there)."""
    problem = Problem("resnet152", 16, input_shape=(3, 224, 224), ipus=2, optimizer="sgd")
    profile, space = profile_for(problem), SearchSpace.load(problem)
    screen = Screen(problem, profile, space=space)
    start = next(
        c
        for _, c in screen.candidates(space, naive_baseline(problem, profile))
        if layout(c) == SHARDED and screen(c) is not None
    )
    every = 3
    config = start.replace(
        recompute="all", checkpoints=checkpoints_every(profile, start.splits, every)
    )
    assert screen(config) is not None and checkpoint_spacing(profile, config) == every
    moved = [c for knob, c in screen.candidates(space, config) if knob == "splits"]
    assert len(moved) >= 4
    for c in moved:
        assert c.checkpoints == checkpoints_every(profile, c.splits, every)
        assert screen(c) is not None
