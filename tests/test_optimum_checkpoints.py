"""--trainer optimum checkpoints per pipelined class (issue 23): the layers our optimum target
checkpoints are those optimum-graphcore's parallelize() hooks with `recomputation_checkpoint`
under `recompute_checkpoint_every_layer`, a layer ending a stage included (issue 46).

`optimum_loop` below re-runs optimum's layer loops on the model's transformers config, as the
source has them (huggingface/optimum-graphcore main, optimum/graphcore/models/):
- distilbert/modeling_distilbert.py, DistilBertPipelineMixin.parallelize, which
  PipelinedDistilBertForMaskedLM.parallelize calls: `index != self.config.num_hidden_layers - 1`;
- deberta/modeling_deberta.py, DebertaPipelineMixin.parallelize (PipelinedDebertaForMaskedLM
  has none of its own): the same test;
- bart/modeling_bart.py, PipelinedBartForConditionalGeneration.parallelize: the same test, in
  the encoder's loop and in the decoder's (BartConfig.num_hidden_layers is encoder_layers).
Both MLM heads are tied to the word embedding, which is not what decides it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_hf_configs import CONFIGS, FFN, HEADS, HIDDEN, VOCAB, offline  # noqa: F401 (offline: autouse fixture)
from transformers import AutoConfig

from ipu_autotune.guide.warmstart import naive_baseline
from ipu_autotune.problem import Problem
from ipu_autotune.profiles.optimum_placement import SKIPPED_INDEX
from ipu_autotune.profiles.placement import optimum_checkpoints
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.optimum_target import PIPELINED, unexpressible

DISTILBERT = dict(
    model_type="distilbert",
    dim=HIDDEN,
    n_heads=HEADS,
    hidden_dim=FFN,
    vocab_size=VOCAB,
    max_position_embeddings=512,
)
#: (family, task) -> the layer stacks of optimum's loops, in order, as module paths
STACKS = {
    ("distilbert", "masked-lm"): ("distilbert.transformer.layer",),
    ("deberta", "masked-lm"): ("deberta.encoder.layer",),
    ("bart", "seq2seq-lm"): ("model.encoder.layers", "model.decoder.layers"),
}


def problem_for(tmp_path: Path, family: str, task: str, ipus: int = 1, **config: Any) -> Problem:
    # a folder per config: a model's config is read once per process (hf_config._loaded)
    folder = tmp_path / (family + "".join(f"-{k}{v}" for k, v in config.items()))
    folder.mkdir(exist_ok=True)
    base = DISTILBERT if family == "distilbert" else CONFIGS[family]
    (folder / "config.json").write_text(json.dumps({**base, **config}))
    return Problem(f"hf:{folder}", 2, seq_len=64, ipus=ipus, task=task, trainer="optimum")


def optimum_loop(problem: Problem, profile: Any) -> set[str]:
    """The layers optimum's parallelize() checkpoints: each stack's loop
    `for index, layer in enumerate(...)` with
    `if recompute_checkpoint_every_layer and index != self.config.num_hidden_layers - 1`."""
    data = json.loads((tmp_folder(problem) / "config.json").read_text())
    config = AutoConfig.for_model(**data)
    out = set()
    for stack in STACKS[data["model_type"], problem.task]:
        layers = [u.path for u in profile.units if u.path.rsplit(".", 1)[0] == stack]
        for index, path in enumerate(layers):
            if index != config.num_hidden_layers - 1:
                out.add(path)
    return out


def tmp_folder(problem: Problem) -> Path:
    return Path(problem.model.removeprefix("hf:"))


def stage_ends(profile: Any, splits: tuple[str, ...]) -> set[str]:
    """The unit before each split: its output leaves the IPU and is stashed anyway."""
    return {profile.units[profile.unit_index(s) - 1].path for s in splits}


def test_each_pipelined_class_has_its_checkpoint_rule() -> None:
    assert set(SKIPPED_INDEX) == set(PIPELINED)


@pytest.mark.parametrize("layers", [3, 4])
@pytest.mark.parametrize(
    "family, key", [("distilbert", "n_layers"), ("deberta", "num_hidden_layers")]
)
def test_mlm_checkpoints_skip_the_last_layer_though_the_head_is_tied(
    tmp_path: Path, family: str, key: str, layers: int
) -> None:
    """DistilBERT and DeBERTa MLM: their tied head does not make optimum checkpoint every layer;
    the mixin's `index != num_hidden_layers - 1` leaves the last layer out."""
    problem = problem_for(tmp_path, family, "masked-lm", **{key: layers})
    profile = profile_for(problem)
    assert any(u.placed_with is not None for u in profile.units)  # the head is tied
    expected = optimum_loop(problem, profile)
    assert len(expected) == layers - 1
    assert set(optimum_checkpoints(profile)) == expected
    # Over 2 IPUs the layer ending stage 0 keeps its checkpoint: parallelize() registers it
    # (issue 46).
    two = problem_for(tmp_path, family, "masked-lm", ipus=2, **{key: layers})
    baseline = naive_baseline(two, profile)
    assert baseline.splits and not unexpressible(two, baseline)
    assert stage_ends(profile, baseline.splits) & expected
    assert set(baseline.checkpoints) in (set(), expected)


@pytest.mark.parametrize("encoder, decoder", [(4, 2), (2, 4), (3, 3)])
def test_bart_checkpoints_skip_index_encoder_layers_minus_1_in_both_stacks(
    tmp_path: Path, encoder: int, decoder: int
) -> None:
    """BART compares both loops' index with num_hidden_layers (= encoder_layers): with 4 + 2
    layers only the encoder's last goes unchecked; with 2 + 4 encoder.layers.1 and
    decoder.layers.1 (decoder.layers.3 keeps its checkpoint); with 3 + 3 both stacks' last."""
    problem = problem_for(
        tmp_path, "bart", "seq2seq-lm", encoder_layers=encoder, decoder_layers=decoder
    )
    profile = profile_for(problem)
    expected = optimum_loop(problem, profile)
    skipped = {f"model.encoder.layers.{encoder - 1}"} | (
        {f"model.decoder.layers.{encoder - 1}"} if encoder <= decoder else set()
    )
    layers = {u.path for u in profile.units if ".layers." in u.path}
    assert len(layers) == encoder + decoder and expected == layers - skipped
    assert set(optimum_checkpoints(profile)) == expected
    two = problem_for(
        tmp_path, "bart", "seq2seq-lm", ipus=2, encoder_layers=encoder, decoder_layers=decoder
    )
    baseline = naive_baseline(two, profile)
    assert baseline.splits and not unexpressible(two, baseline)
    assert set(baseline.checkpoints) in (set(), expected)
