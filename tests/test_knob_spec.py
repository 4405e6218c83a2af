"""The knob spec (issue 21): one entry per knob, read by every layer, and the batch
arithmetic in one place."""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from typing import Any

import pytest

from ipu_autotune import batch
from ipu_autotune.backends.estimate import EstimateBackend, estimate, profile_at_micro_batch
from ipu_autotune.guide.single_changes import single_changes
from ipu_autotune.knob_spec import BY_NAME, SPACE_KNOBS, SPEC, applies
from ipu_autotune.present.trial_line import changed_knobs
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.knobs import builtin_space_path, read_space_knobs
from ipu_autotune.search.replay import wanted_params
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study.records import _RandomAnswers

CNN = Problem("resnet18", 4, (3, 32, 32), num_classes=10, ipus=4)


def test_every_config_field_has_one_entry_and_every_entry_is_a_knob() -> None:
    config_fields = {f.name for f in fields(Config)}
    assert config_fields == {k.name for k in SPEC if k.field}
    assert len(BY_NAME) == len(SPEC)  # no knob twice
    default = read_space_knobs(builtin_space_path("default"), "default.toml")
    # a space knob the default space leaves out has the spec's value instead
    assert all(name in default or BY_NAME[name].space_default is not None for name in SPACE_KNOBS)


@pytest.mark.parametrize("name", [f.name for f in fields(Config)])
def test_the_trial_line_abbreviates_every_knob(name: Any) -> None:
    """No knob falls back to `name=value` (embedding_serialization did before the spec)."""
    changed = {
        "precision": "16.16",
        "partials": "half",
        "stochastic_rounding": True,
        "loss_scaling": 128.0,
        "optimizer_state": "half",
        "ipus_per_replica": 4,
        "replicas": 2,
        "splits": ("layer3",),
        "execution": "sharded",
        "recompute": "none",
        "checkpoints": ("layer1",),
        "available_memory_proportion": (0.3,),
        "optimizer_offload": True,
        "replicated_tensor_sharding": True,
        "gradient_accumulation": 8,
        "device_iterations": 4,
        "eight_bit_io": True,
        "io_tiles": 32,
        "loader_mode": "async",
        "loader_workers": 4,
        "micro_batch": 16,
        "embedding_serialization": 2,
        "input_embedding_serialization": 2,
    }
    line = changed_knobs(
        Config(ipus_per_replica=2), Config(ipus_per_replica=2).replace(**{name: changed[name]})
    )
    assert line != "= baseline" and "=" not in line, line


def test_the_trial_line_order_is_the_specs() -> None:
    line = changed_knobs(
        Config(), Config(embedding_serialization=4, precision="16.16", gradient_accumulation=8)
    )
    assert line == "16.16 ga8 vocab/4"


def test_replay_covers_every_plain_knob() -> None:
    c = Config(embedding_serialization=2, micro_batch=8, loader_workers=2)
    wanted = wanted_params(c, profile_for(CNN))
    for knob in SPEC:
        if knob.field and knob.kind != "paths" and knob.name != "available_memory_proportion":
            assert knob.name in wanted, knob.name


# --- "does offload apply here?": one predicate, asked by the space, the guide, the rules and
# the estimator alike ---------------------------------------------------------------------

MK1 = dataclasses.replace(CNN, target="mk1")
COMBINED = dataclasses.replace(CNN, optimizer="sgd_combined")


@pytest.mark.parametrize("problem", [MK1, COMBINED])
def test_offload_where_it_does_not_apply(problem: Any) -> None:
    assert not applies("optimizer_offload", problem)
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    rng = __import__("random").Random(4)
    assert not any(
        space.sample(_RandomAnswers(rng), problem, profile).optimizer_offload for _ in range(40)
    )
    moves = [knob for knob, _ in single_changes(space, problem, profile, Config())]
    assert "optimizer_offload" not in moves and "precision" in moves
    assert violations(problem, Config(optimizer_offload=True))  # refused, with a reason
    plain, offloaded = (
        estimate(problem, Config(optimizer_offload=o), profile) for o in (False, True)
    )
    assert (
        plain.max_tile_bytes == offloaded.max_tile_bytes
        and plain.throughput == offloaded.throughput
    )


def test_offload_where_it_applies_moves_state_off_chip() -> None:
    assert applies("optimizer_offload", CNN)
    profile = profile_for(CNN)
    plain, offloaded = (estimate(CNN, Config(optimizer_offload=o), profile) for o in (False, True))
    assert offloaded.required_bytes[0] < plain.required_bytes[0]
    assert "optimizer_offload" in [
        knob for knob, _ in single_changes(SearchSpace.load(CNN), CNN, profile, Config())
    ]


def test_the_guide_moves_embedding_serialization_where_it_applies() -> None:
    """Missing from the warm starts' single changes before the spec; there by construction now."""
    mlm = Problem("hf:bert-base-uncased", 2, task="masked-lm", seq_len=32, ipus=4)
    space = SearchSpace.load(mlm)
    moved = [
        c.embedding_serialization
        for knob, c in single_changes(space, mlm, profile_for(mlm), Config())
        if knob == "embedding_serialization"
    ]
    assert moved == [2, 4, 8]
    assert "embedding_serialization" not in [
        k for k, _ in single_changes(SearchSpace.load(CNN), CNN, profile_for(CNN), Config())
    ]


# --- batch arithmetic --------------------------------------------------------------------


def test_batch_arithmetic() -> None:
    c = Config(gradient_accumulation=4, replicas=2, device_iterations=3)
    assert (
        batch.micro_batch(CNN, c) == 4 and batch.micro_batch(CNN, c.replace(micro_batch=16)) == 16
    )
    assert batch.global_batch(CNN, c) == 32 and batch.samples_per_call(CNN, c) == 96
    fixed = dataclasses.replace(CNN, global_batch=64)
    assert batch.accumulation_for_global_batch(fixed, 2) == 8
    assert batch.accumulation_for_global_batch(fixed, 2, 16) == 2
    assert batch.accumulation_for_global_batch(fixed, 3) is None


def test_a_micro_batch_is_estimated_without_rewriting_the_problem() -> None:
    """The config's micro-batch: the model traced at it, the Problem as given; the same
    figures as the problem rewritten to that batch (what the estimator did before)."""
    c = Config(micro_batch=16, gradient_accumulation=2)
    at_16 = dataclasses.replace(CNN, batch_size=16)
    profile = profile_at_micro_batch(CNN, c, profile_for(CNN))
    assert (
        profile.batch_size == 16
        and profile_at_micro_batch(CNN, Config(), profile_for(CNN)).batch_size == 4
    )
    got, rewritten = EstimateBackend().measure(CNN, c), estimate(at_16, c, profile_for(at_16))
    assert (
        got.max_tile_bytes == rewritten.max_tile_bytes and got.throughput == rewritten.throughput
    )
    assert got.throughput != EstimateBackend().measure(CNN, c.replace(micro_batch=None)).throughput
