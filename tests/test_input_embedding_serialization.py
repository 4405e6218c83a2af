"""input_embedding_serialization (issue 21, must show 1): the token embedding of an hf: model
without a vocabulary head as masked look-ups into slices of its table (optimum-graphcore's
SerializedEmbedding), added through the knob spec, the estimator and the export."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from conftest_fake_sdk import fake_sdk
from testing import not_none

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.export.ipu_config import ipu_config
from ipu_autotune.export.python import render_snippet
from ipu_autotune.guide.single_changes import single_changes
from ipu_autotune.present.trial_line import changed_knobs
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study.records import _RandomAnswers

QA = Problem("hf:bert-base-uncased", 2, task="question-answering", seq_len=32, ipus=4)
MLM = Problem("hf:bert-base-uncased", 2, task="masked-lm", seq_len=32, ipus=4)
PIPELINED = Config(
    precision="16.16",
    ipus_per_replica=4,
    gradient_accumulation=16,
    splits=("bert.encoder.layer.3", "bert.encoder.layer.6", "bert.encoder.layer.9"),
)


@pytest.mark.parametrize(
    "problem, factor, message",
    [
        (MLM, 2, "without a vocabulary head"),
        (Problem("resnet18", 4), 2, "hf: text model"),
        (QA, 4, "does not divide the 30,522 embedding rows"),
    ],
)
def test_rules_refuse_it_where_it_cannot_run(problem: Any, factor: int, message: str) -> None:
    found = violations(problem, Config(input_embedding_serialization=factor))
    assert found and message in found[0]


def test_rules_accept_a_factor_that_divides_the_rows() -> None:
    assert violations(QA, Config(input_embedding_serialization=2)) == []


def test_not_searched_by_default_searched_when_a_space_lists_it() -> None:
    profile = profile_for(QA)
    rng = random.Random(5)
    default = SearchSpace.load(QA)
    assert {
        default.sample(_RandomAnswers(rng), QA, profile).input_embedding_serialization
        for _ in range(30)
    } == {1}
    listed = default.with_knob("input_embedding_serialization", [1, 2, 4], "--space")
    seen = {
        listed.sample(_RandomAnswers(rng), QA, profile).input_embedding_serialization
        for _ in range(40)
    }
    assert seen == {1, 2}  # 4 does not divide BERT's 30,522 rows
    moves = [
        c.input_embedding_serialization
        for knob, c in single_changes(listed, QA, profile, Config())
        if knob == "input_embedding_serialization"
    ]
    assert moves == [2]  # the guide's single change, from the spec


def test_the_estimate_charges_its_look_ups_and_credits_no_memory() -> None:
    profile = profile_for(QA)
    plain = estimate(QA, PIPELINED, profile)
    split = estimate(QA, PIPELINED.replace(input_embedding_serialization=2), profile)
    assert not_none(split.throughput) < not_none(plain.throughput)
    assert split.max_tile_bytes[0] > plain.max_tile_bytes[0]  # more code on the embedding's IPU
    assert split.max_tile_bytes[1:] == plain.max_tile_bytes[1:]


def test_the_snippet_looks_up_the_same_vectors() -> None:
    """SerializedEmbedding as the snippet defines it gives the embedding's own output."""
    ns: dict[str, Any] = {}
    with fake_sdk():
        exec(render_snippet(QA, Config(input_embedding_serialization=2)), ns)
    table = torch.nn.Embedding(10, 3, padding_idx=0)
    split = ns["SerializedEmbedding"](table, 2)
    ids = torch.tensor([[0, 4, 5, 9]])
    assert torch.equal(split(ids), table(ids))
    assert torch.equal(split.to_embedding().weight, table.weight)
    assert (
        split.split_embeddings[0].padding_idx == 0
        and split.split_embeddings[1].padding_idx is None
    )


def test_ipu_config_carries_it_as_embedding_serialization_factor() -> None:
    optimum = Problem(**{**QA.to_dict(), "trainer": "optimum"})
    c = PIPELINED.replace(
        input_embedding_serialization=2,
        optimizer_state="half",
        partials="half",
        stochastic_rounding=True,
    )
    assert ipu_config(optimum, c, profile_for(optimum))["embedding_serialization_factor"] == 2


def test_the_trial_line_and_the_stored_dict() -> None:
    assert changed_knobs(Config(), Config(input_embedding_serialization=2)) == "embed/2"
    assert (
        "input_embedding_serialization" not in Config().to_dict()
    )  # older records keep their dict
    assert (
        Config.from_dict(
            Config(input_embedding_serialization=2).to_dict()
        ).input_embedding_serialization
        == 2
    )
