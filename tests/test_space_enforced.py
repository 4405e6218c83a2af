"""A knob the search space fixes stays fixed, whatever proposed the trial (issue 10, must-show 2).

The issue's own space files, on a full study in-process: every trial of every origin
(baseline aside, which is the user's own starting point) keeps the fixed values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import optuna
import pytest
from testing import RESNET18_CIFAR_4IPU as PROBLEM

from ipu_autotune.backends.base import Backend
from ipu_autotune.cli import main
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.problem import Config
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study.records import _RandomAnswers
from ipu_autotune.study.runner import Runner


def tune(tmp_path: Path, space_text: str, *extra: str) -> list[dict[str, Any]]:
    space = tmp_path / "s.toml"
    space.write_text(space_text)
    out = tmp_path / "out"
    code = main(
        [
            "resnet18",
            "--batch-size",
            "32",
            "--input-shape",
            "3,32,32",
            "--ipus",
            "4",
            "--space",
            str(space),
            "--seed",
            "1",
            "--trials",
            "20",
            "--quiet",
            "--storage",
            f"sqlite:///{tmp_path / 'db.sqlite'}",
            "--out",
            str(out),
            *extra,
        ]
    )
    assert code == 0
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert len(trials) == 20
    return trials


def origins(trials: list[dict[str, Any]]) -> set[str]:
    return {t["origin"].split(" ")[0] for t in trials}


@pytest.mark.slow
def test_fixed_offload_rts_and_eight_bit_io_stay_off_in_every_trial(tmp_path: Path) -> None:
    trials = tune(
        tmp_path,
        "[knobs]\noptimizer_offload=false\nreplicated_tensor_sharding=false\neight_bit_io=false\n",
        "--no-numerics",
    )
    assert {"baseline", "climb", "sampled"} <= origins(trials)
    for t in trials:
        c = t["config"]
        assert (c["optimizer_offload"], c["replicated_tensor_sharding"], c["eight_bit_io"]) == (
            False,
            False,
            False,
        ), t


@pytest.mark.slow
def test_fixed_partials_and_loss_scale_survive_the_numerics_advice(tmp_path: Path) -> None:
    trials = tune(tmp_path, '[knobs]\npartials = "float"\nloss_scaling = 128.0\n')
    assert any(t["config"]["precision"] != "32.32" for t in trials)  # the knobs were in play
    for t in trials:
        c = t["config"]
        assert c["partials"] == "float", t
        assert c["loss_scaling"] == (128.0 if c["precision"].startswith("16.") else 1.0), t


# --- the one enforcement point, unit by unit ----------------------------------------------------


def fixed_space(tmp_path: Path, text: str) -> SearchSpace:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return SearchSpace.load(PROBLEM, path)


def test_outside_names_the_knobs_the_space_cannot_produce(tmp_path: Path) -> None:
    profile = profile_for(PROBLEM)
    space = fixed_space(tmp_path, "[knobs]\neight_bit_io=false\noptimizer_offload=false\n")
    inside = space.sample(_RandomAnswers(__import__("random").Random(3)), PROBLEM, profile)
    assert space.outside(PROBLEM, profile, inside) == []
    bad = inside.replace(eight_bit_io=True, optimizer_offload=True)
    assert space.outside(PROBLEM, profile, bad) == ["optimizer_offload", "eight_bit_io"]
    moved = space.project(PROBLEM, profile, bad)
    assert moved == inside and space.outside(PROBLEM, profile, moved) == []


def test_every_sampled_config_is_inside_its_space() -> None:
    """`outside` is decided by the sampler itself: whatever it draws, it contains."""
    import random

    profile = profile_for(PROBLEM)
    space = SearchSpace.load(PROBLEM)
    rng = random.Random(5)
    for _ in range(60):
        c = space.sample(_RandomAnswers(rng), PROBLEM, profile)
        assert space.outside(PROBLEM, profile, c) == [], c


def test_warm_starts_climb_only_through_the_space(tmp_path: Path) -> None:
    profile = profile_for(PROBLEM)
    space = fixed_space(
        tmp_path,
        '[knobs]\nprecision = ["32.32", "16.16"]\nloss_scaling = 128.0\n'
        'partials = "float"\neight_bit_io = false\n',
    )
    found = proposals(PROBLEM, profile, space, naive_baseline(PROBLEM, profile))
    assert len(found) > 2
    for p in found[1:]:
        assert space.outside(PROBLEM, profile, p.config) == [], p


class _Trial:
    """An Optuna trial stand-in for `Runner.config_for`: enqueued attributes, random answers."""

    def __init__(self, user_attrs: Any) -> None:
        import random

        self.user_attrs = user_attrs
        rng = _RandomAnswers(random.Random(0))
        self.suggest_categorical, self.suggest_int, self.suggest_float = (
            rng.suggest_categorical,
            rng.suggest_int,
            rng.suggest_float,
        )

    def as_trial(self) -> optuna.Trial:
        return cast(optuna.Trial, self)  # config_for reads user_attrs and the suggest_ calls


def test_the_run_loop_moves_enqueued_and_adjusted_configs_into_the_space(tmp_path: Path) -> None:
    profile = profile_for(PROBLEM)
    space = fixed_space(tmp_path, "[knobs]\neight_bit_io=false\n")
    runner = Runner(
        study=optuna.create_study(),
        problem=PROBLEM,
        profile=profile,
        space=space,
        backend=cast(Backend, None),  # config_for measures nothing
    )
    outside = Config(eight_bit_io=True, gradient_accumulation=4, replicas=4)  # replicas "max"
    config, origin = runner.config_for(
        _Trial({"enqueued_config": outside.to_dict(), "origin": "guided"}).as_trial()
    )
    assert not config.eight_bit_io and origin == "guided, moved into your space"
    # the baseline runs as given, marked
    config, origin = runner.config_for(
        _Trial({"enqueued_config": outside.to_dict(), "origin": "baseline"}).as_trial()
    )
    assert config == outside and origin == "baseline (outside your space: eight_bit_io)"
    # an adjustment (numerics advice) that breaks a fixed knob is undone
    runner.adjust = lambda c: c.replace(eight_bit_io=True)
    config, origin = runner.config_for(_Trial({}).as_trial())
    assert not config.eight_bit_io and origin == "sampled"
