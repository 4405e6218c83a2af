"""Search spaces: every sampled config is valid; enqueued configs replay exactly."""

from pathlib import Path
from typing import Any

import optuna
import pytest

from ipu_autotune.errors import UsageError
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.space import SearchSpace, family

PROBLEMS = [
    Problem("resnet101", 64),
    Problem("resnet101", 64, global_batch=512),
    Problem("resnet50", 16, input_shape=(3, 224, 224), ipus=4, optimizer="sgd_combined"),
    Problem("resnet18", 8, ipus=8, target="mk1"),
    # heads tied to the embedding: no split may take them off its stage when pipelined
    Problem("hf:bert-base-uncased", 4, ipus=4, task="masked-lm", seq_len=128),
    Problem("hf:gpt2", 4, ipus=4, task="causal-lm", seq_len=128),
]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.slug)
def test_random_samples_all_pass_the_rules(problem: Any) -> None:
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen_layouts = set()
    for _ in range(150):
        trial = study.ask()
        config = space.sample(trial, problem, profile)
        assert violations(problem, config, profile.module_order) == [], config
        seen_layouts.add((config.ipus_per_replica, config.replicas))
        study.tell(trial, 1.0)
    assert len(seen_layouts) > 1  # the layout itself is searched


def test_params_for_replays_the_workshop_config() -> None:
    problem = PROBLEMS[0]
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    config = Config(
        precision="16.16",
        optimizer_state="half",
        loss_scaling=1024.0,
        ipus_per_replica=2,
        splits=("layer3.8",),
        gradient_accumulation=8,
        device_iterations=4,
        eight_bit_io=True,
    )
    study = optuna.create_study()
    study.enqueue_trial(space.params_for(problem, profile, config))
    assert space.sample(study.ask(), problem, profile) == config


def test_user_space_fixes_knobs(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[knobs]\nprecision = "16.16"\nipus_per_replica = 1\ndevice_iterations = 8\n')
    problem = PROBLEMS[0]
    space = SearchSpace.load(problem, path)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        c = space.sample(study.ask(), problem, profile_for(problem))
        assert (c.precision, c.ipus_per_replica, c.device_iterations) == ("16.16", 1, 8)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[knobs]\nprecison = ['16.16']\n", "did you mean 'precision'"),
        ("[knobs]\nprecision = ['16.8']\n", "precision cannot take '16.8'"),
        ("[knobs]\ngradient_accumulation = { low = 8, high = 2 }\n", "low <= high"),
        ("[knobs]\nprecision = [\n", "malformed TOML"),
        ("[knobs]\nrecompute = []\n", "no values"),
    ],
)
def test_bad_space_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        SearchSpace.load(PROBLEMS[0], path)


def test_families() -> None:
    assert family("vit_b_16") == "transformer" and family("resnet50") == "cnn"
    assert "search_spaces/transformer.toml" in SearchSpace.load(Problem("vit_b_16", 8)).sources


def test_a_projected_config_is_inside_without_a_second_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`project` remembers what it returned as the sampler produced it: `outside` of it is
    empty (a replay of the sampler's own output gives it back), answered without a replay."""
    from ipu_autotune.guide.warmstart import naive_baseline

    problem = Problem("resnet18", 8, (3, 32, 32), ipus=2)
    profile, space = profile_for(problem), SearchSpace.load(problem)
    far = naive_baseline(problem, profile).replace(
        available_memory_proportion=(0.123, 0.123), loader_workers=13
    )
    moved = space.project(problem, profile, far)
    assert moved != far and space.outside(problem, profile, far)
    replays = []
    real = SearchSpace._replayed

    def replayed(self: SearchSpace, *a: Any, **k: Any) -> Any:  # counted
        replays.append(a)
        return real(self, *a, **k)

    monkeypatch.setattr(SearchSpace, "_replayed", replayed)
    assert space.outside(problem, profile, moved) == [] and not replays
    fresh = SearchSpace.load(
        problem
    )  # and a space that never projected it replays it to the same answer
    assert fresh.outside(problem, profile, moved) == [] and replays
