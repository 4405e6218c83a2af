"""embedding_serialization: the vocabulary projection as serialised matmuls, from the rules and
the transformer space through the estimate to the PopTorch code and the IPUConfig export."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.export.ipu_config import ipu_config
from ipu_autotune.export.python import render_snippet
from ipu_autotune.models.hf import build_hf_model
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study.records import _RandomAnswers

BERT_MLM = Problem("hf:bert-base-uncased", 4, task="masked-lm", seq_len=128)
T5 = Problem("hf:t5-small", 2, task="seq2seq-lm", seq_len=128)
PIPELINE = Config(
    precision="16.16",
    ipus_per_replica=4,
    gradient_accumulation=16,
    splits=("bert.encoder.layer.0", "bert.encoder.layer.4", "bert.encoder.layer.8"),
)


GPT2 = Problem("hf:gpt2", 1, task="causal-lm", seq_len=16, ipus=4)


@pytest.mark.parametrize(
    "problem, factor, message",
    [
        (
            Problem("hf:bert-base-uncased", 4, task="question-answering"),
            2,
            "projects onto the vocabulary",
        ),
        (Problem("resnet18", 4), 2, "needs an hf: model"),
    ],
)
def test_rules_refuse_a_factor_without_a_vocabulary_head(
    problem: Any, factor: int, message: str
) -> None:
    found = violations(problem, Config(embedding_serialization=factor))
    assert found and message in found[0]


def test_rules_accept_every_factor_on_a_vocabulary_head_the_export_pads_what_it_must() -> None:
    assert violations(BERT_MLM, Config(embedding_serialization=2)) == []
    assert violations(BERT_MLM, Config(embedding_serialization=4)) == []  # 30,522 padded to 30,524
    assert violations(T5, Config(embedding_serialization=8)) == []
    assert violations(GPT2, Config(embedding_serialization=8)) == []  # 50,257 padded to 50,264


@pytest.mark.parametrize(
    "problem, expected",
    [
        (BERT_MLM, {1, 2, 4, 8}),
        (T5, {1, 2, 4, 8}),
        (GPT2, {1, 2, 4, 8}),
        (Problem("hf:bert-base-uncased", 4, task="question-answering"), {1}),
        (Problem("vit_b_16", 2), {1}),
    ],
)
def test_the_transformer_space_searches_only_factors_that_apply(
    problem: Any, expected: Any
) -> None:
    space = SearchSpace.load(problem)
    profile = profile_for(problem)
    rng = random.Random(3)
    seen = {
        space.sample(_RandomAnswers(rng), problem, profile).embedding_serialization
        for _ in range(60)
    }
    assert seen == expected


def test_cnn_space_never_serialises() -> None:
    problem = Problem("resnet18", 4)
    space = SearchSpace.load(problem)
    rng = random.Random(0)
    assert {
        space.sample(_RandomAnswers(rng), problem, profile_for(problem)).embedding_serialization
        for _ in range(20)
    } == {1}


def test_the_estimate_splits_the_projection_temporaries_not_its_weights() -> None:
    backend = EstimateBackend()
    plain = backend.measure(BERT_MLM, PIPELINE)
    two = backend.measure(BERT_MLM, PIPELINE.replace(embedding_serialization=2))
    head = plain.breakdown[0]  # the tied MLM head runs on IPU0 with the embedding
    assert two.breakdown[0]["temporary"] < head["temporary"]
    for category in ("weights", "optimizer", "gradients", "stash"):
        assert two.breakdown[0][category] == head[category]
    assert two.breakdown[1:] == plain.breakdown[1:]  # the encoder IPUs are untouched


def test_m21_head_ipu_shrinks_with_each_factor_but_stays_out_of_memory() -> None:
    """mT5's untied 250112-word head alone on IPU3: serialising shrinks its temporaries only;
    its on-chip AdamW state still overflows (optimum's notebook also moved state off chip)."""
    problem = Problem("hf:mt5-small", 1, task="seq2seq-lm", seq_len=128, optimizer="adamw", ipus=4)
    config = Config(
        precision="16.32",
        ipus_per_replica=4,
        gradient_accumulation=16,
        splits=("encoder.block.0", "decoder.block.0", "lm_head"),
    )
    tiles = [
        EstimateBackend()
        .measure(problem, config.replace(embedding_serialization=f))
        .max_tile_bytes[3]
        for f in (1, 2, 4, 8)
    ]
    assert tiles == sorted(tiles, reverse=True) and tiles[0] > tiles[-1]
    assert (
        not EstimateBackend().measure(problem, config.replace(embedding_serialization=8)).feasible
    )


def test_config_key_round_trips_and_old_configs_keep_their_dict() -> None:
    assert "embedding_serialization" not in Config().to_dict()
    c = Config(embedding_serialization=2)
    assert Config.from_dict(c.to_dict()) == c


def test_ipu_config_export_carries_the_factor() -> None:
    # FP16 weights with FP16 optimizer state and stochastic rounding: what IPUTrainer trains
    config = PIPELINE.replace(
        embedding_serialization=2, optimizer_state="half", stochastic_rounding=True
    )
    exported = ipu_config(BERT_MLM, config, profile_for(BERT_MLM))
    assert exported["embedding_serialization_factor"] == 2


def _through_fake_poptorch(snippet: str, model: Any, *batch: Any) -> Any:
    """The snippet's TrainingModel run on the fake SDK: its loss, the (mode, factor) of each
    serialised matmul PopTorch received, and the OutputChannels mode to compare them with."""
    from conftest_fake_sdk import fake_sdk

    with fake_sdk() as poptorch:
        from poptorch import ops

        ns: dict[str, Any] = {}
        exec(compile(snippet, "best_options.py", "exec"), ns)
        training = ns["TrainingModel"](model)
        ops.serialized_matmuls.clear()
        with torch.no_grad():
            loss = training(*batch)
        return loss, list(ops.serialized_matmuls), poptorch.MatMulSerializationMode.OutputChannels


@pytest.mark.slow
def test_the_snippet_serialises_the_projection_as_poptorch_sees_it_to_the_same_loss() -> None:
    """Config -> snippet -> fake PopTorch: the factor PopTorch receives is the config's, in
    OutputChannels mode, and the serialised projection gives the plain model's loss."""
    torch.manual_seed(0)
    config = PIPELINE.replace(precision="32.32", embedding_serialization=2)
    snippet = render_snippet(BERT_MLM, config)
    assert "poptorch.serializedMatMul" in snippet
    model = build_hf_model(BERT_MLM.model, "masked-lm", 2, device="cpu").eval()
    ids = torch.randint(0, 30522, (2, 12))
    mask, labels = torch.ones_like(ids), torch.randint(0, 30522, (2, 12))
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss, matmuls, output_channels = _through_fake_poptorch(snippet, model, ids, mask, labels)
    assert matmuls == [(output_channels, 2)]
    # the tie survives: the projection still reads the input embedding's weight
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert loss.item() == pytest.approx(plain.item(), rel=1e-5)


@pytest.mark.slow
def test_a_vocabulary_the_factor_does_not_divide_is_padded_and_the_loss_is_unchanged() -> None:
    """GPT-2's 50,257 words at factor 4: the snippet pads the tied embedding to 50,260 (as
    optimum-graphcore does), PopTorch gets a factor that divides, and the padding words'
    logits are masked so the loss is the unpadded model's."""
    torch.manual_seed(0)
    config = Config(
        precision="32.32",
        ipus_per_replica=4,
        gradient_accumulation=9,
        embedding_serialization=4,
        splits=("transformer.h.3", "transformer.h.6", "transformer.h.9"),
    )
    assert violations(GPT2, config) == []
    snippet = render_snippet(GPT2, config)
    assert "50,257 words padded to 50,260, in 4 pieces" in snippet
    model = build_hf_model(GPT2.model, "causal-lm", 2, device="cpu").eval()
    ids = torch.randint(0, 50257, (2, 16))
    with torch.no_grad():
        plain = model(input_ids=ids, labels=ids).loss
    loss, matmuls, output_channels = _through_fake_poptorch(
        snippet, model, ids, torch.ones_like(ids), ids
    )
    assert matmuls == [(output_channels, 4)]
    assert model.lm_head.weight.shape[0] == 50260
    assert model.lm_head.weight is model.transformer.wte.weight  # still tied
    assert loss.item() == pytest.approx(plain.item(), rel=1e-5)


def test_the_fake_refuses_a_factor_that_does_not_divide_like_popart() -> None:
    from conftest_fake_sdk import fake_sdk

    with fake_sdk() as poptorch:
        with pytest.raises(poptorch.Error, match="Invalid serialisation factor 4"):
            poptorch.serializedMatMul(
                torch.zeros(2, 8),
                torch.zeros(8, 30522),
                poptorch.MatMulSerializationMode.OutputChannels,
                4,
            )
