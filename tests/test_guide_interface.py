"""The guide behind one narrow interface (issue 41): `propose(History) -> Proposal | None`.

The runner and the trial line read a Proposal's fields; nothing outside `guide/` reads or
sets the guide's state."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import optuna
from testing import RESNET18_CIFAR_1IPU as PROBLEM, not_none

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.guide.proposal import History, Proposal, Reason
from ipu_autotune.guide.warmstart import naive_baseline
from ipu_autotune.present.trial_line import short_label
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study.records import create_sampler, enqueue, records
from ipu_autotune.study.runner import Runner

PACKAGE = Path(__file__).resolve().parents[1] / "ipu_autotune"
#: what a module outside guide/ may call on a Guide
INTERFACE = {"propose", "stopping", "first_trials", "prior_judgement", "has_prior"}


def guide_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, attribute) of every `<...>guide.<attribute>` in a module."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
            if name == "guide":
                out.append((node.lineno, node.attr))
    return out


def test_nothing_outside_the_guide_touches_its_state() -> None:
    outside = [p for p in PACKAGE.rglob("*.py") if "guide" not in p.relative_to(PACKAGE).parts[:1]]
    assert len(outside) > 50  # the scan reads the package
    found = [
        f"{p.relative_to(PACKAGE)}:{line} .{attr}"
        for p in outside
        for line, attr in guide_uses(ast.parse(p.read_text()))
        if attr not in INTERFACE
    ]
    assert found == []


def test_the_scan_sees_a_side_attribute() -> None:
    uses = guide_uses(
        ast.parse("self.guide.chance\nguide.pool.update(x)\nrunner.guide.propose(h)\n")
    )
    assert sorted(attr for _, attr in uses) == ["chance", "pool", "propose"]


class OneProposal:
    """A guide that proposes one configuration, for what the runner does with a Proposal."""

    def __init__(self, proposal: Proposal) -> None:
        self.proposal = proposal
        self.histories: list[History] = []

    def propose(self, history: History) -> Proposal | None:
        self.histories.append(history)
        return self.proposal if not self.histories[:-1] else None

    def stopping(self, history: History) -> Any:
        return None


def test_the_runner_enqueues_the_proposal_and_the_trial_line_shows_its_reason() -> None:
    profile = profile_for(PROBLEM)
    space = SearchSpace.load(PROBLEM)
    baseline = naive_baseline(PROBLEM, profile)
    config = space.project(PROBLEM, profile, baseline.replace(gradient_accumulation=4))
    guide = OneProposal(Proposal.guided(config, Reason.GAIN, 0.42, 0.08))
    study = optuna.create_study(direction="maximize", sampler=create_sampler(0))
    enqueue(study, space, PROBLEM, profile, [Proposal(baseline, "baseline")])
    runner = Runner(study, PROBLEM, profile, space, EstimateBackend(), guide=guide)
    first, second = runner.run_one(), runner.run_one()
    assert first.reason is None and short_label(first) == "baseline"
    assert second.config == config and not_none(runner.last_proposal).reason is Reason.GAIN
    # the history the guide was told: the baseline measured, and what the backend would compile
    told = guide.histories[-1]
    assert [c for c, _ in told.measured] == [baseline]
    assert told.would_compile is not None and told.would_compile(config)
    # the record and the trial line carry the reason; the origin keeps the full story
    stored = {r.number: r for r in records(study)}[second.number]
    assert stored.reason == second.reason == "gain" and short_label(stored) == "gain"
    assert stored.origin == "guided (42% chance to fit, expected gain 8.0%)"
    assert study.trials[second.number].user_attrs["proposal"] == {
        "reason": "gain",
        "chance_to_fit": 0.42,
        "expected_gain": 0.08,
    }
