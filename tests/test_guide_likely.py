"""Once a config fits, the guide compiles a candidate more likely to fit than not while one is
worth a compile and at least half what the best bet is worth (guide/likely.py): on a hidden
IPU its bets under an even chance mostly ran out of memory, and an out-of-memory compile gains
nothing and anchors nothing; but a fit is worth at most twice its gain."""

from typing import Any

import pytest
from test_guide_bets import _compiled, _fast_without_accumulation
from testing import RESNET152_2IPU as PROBLEM, not_none

from ipu_autotune.guide.corrected import CorrectedModel, observe
from ipu_autotune.guide.corrected_screen import CorrectedScreen
from ipu_autotune.guide.gain import bar, expected_improvement
from ipu_autotune.guide.guide import EDGE_CONFIDENCE, Guide, GuideSettings
from ipu_autotune.guide.likely import likely_pick
from ipu_autotune.guide.stopping import STOP_GAIN
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace

#: the IPU's busiest tile over the estimate: the anchor fits with about 0.4 % of a tile to spare
TIGHT = 1.41


@pytest.fixture(scope="module")
def judged() -> Any:
    """The corrected model after one tight fit, and every single change of it with its chance
    to fit and its expected gain."""
    profile = profile_for(PROBLEM)
    space = SearchSpace.load(PROBLEM)
    anchor = _fast_without_accumulation(profile)
    measured = [(anchor, _compiled(anchor, profile, TIGHT))]
    assert measured[0][1].feasible
    guide = Guide(PROBLEM, profile, space, GuideSettings(0.05))
    model = CorrectedModel(guide.screen, observe(guide.screen, measured), 0.05)
    best = bar(model, [(anchor, not_none(measured[0][1].throughput))])
    singles = [c for _, c in CorrectedScreen(model).candidates(space, anchor) if c != anchor]
    worth = {c: expected_improvement(model, c, best) for c in singles}
    return model, worth


@pytest.mark.slow
def test_a_likely_fit_worth_a_compile_is_picked_over_a_larger_bet(judged: Any) -> None:
    model, worth = judged
    top = max(worth, key=worth.__getitem__)
    # the case the rule is for: the largest expected gain is a bet under an even chance ...
    assert model.chance(top) < EDGE_CONFIDENCE
    # ... though not more than twice what the likeliest fits are worth (the bets here are
    # worth up to 9x: scaled down, the same order)
    likely = max(w for c, w in worth.items() if model.chance(c) >= EDGE_CONFIDENCE)
    shrink = 1.9 * likely / worth[top]
    worth = {
        c: (w if model.chance(c) >= EDGE_CONFIDENCE else w * shrink) for c, w in worth.items()
    }
    assert max(worth, key=worth.__getitem__) == top
    pick = not_none(likely_pick(model, worth, EDGE_CONFIDENCE))
    # ... and a candidate more likely to fit is worth a compile: it is the one picked
    assert model.chance(pick) >= EDGE_CONFIDENCE and worth[pick] >= STOP_GAIN
    assert worth[pick] == max(w for c, w in worth.items() if model.chance(c) >= EDGE_CONFIDENCE)


@pytest.mark.slow
def test_with_no_likely_fit_worth_a_compile_the_bet_remains(judged: Any) -> None:
    model, worth = judged
    small = {
        c: (w if model.chance(c) < EDGE_CONFIDENCE else STOP_GAIN / 2) for c, w in worth.items()
    }
    assert likely_pick(model, small, EDGE_CONFIDENCE) is None


@pytest.mark.slow
def test_a_likely_fit_worth_under_half_the_best_bet_leaves_the_bet(judged: Any) -> None:
    """Single changes of a settled best whose gains fall toward the noise do not hold the
    compiles once a bet elsewhere is worth more than twice as much."""
    model, worth = judged
    likely = {c: w for c, w in worth.items() if model.chance(c) >= EDGE_CONFIDENCE}
    top = max(likely, key=likely.__getitem__)
    bet = next(c for c in worth if model.chance(c) < EDGE_CONFIDENCE)
    # the likely pick worth just over, then just under, half the best bet
    for share, picked in ((1.01, True), (0.99, False)):
        scaled = {c: likely.get(c, 0.0) for c in worth}
        scaled[bet] = likely[top] / (EDGE_CONFIDENCE * share)
        pick = likely_pick(model, scaled, EDGE_CONFIDENCE)
        assert (pick == top) is picked
        assert picked or pick is None
