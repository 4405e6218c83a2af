"""--trainer optimum for T5 and ViT (issue 23, must show 1): stages where optimum-graphcore's
parallelize() can begin them, and the IPUTrainer block for an image classifier.

Citations (huggingface/optimum-graphcore): optimum/graphcore/models/t5/modeling_t5.py,
PipelinedT5ForConditionalGeneration.parallelize; optimum/graphcore/modeling_utils.py,
get_layer_ipu and _expand_layers_per_ipu_wildcard; optimum/graphcore/models/vit/modeling_vit.py,
PipelinedViTForImageClassification.parallelize.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from test_hf_configs import CONFIGS, offline, write_config  # noqa: F401 (offline: autouse fixture)
from testing import not_none

from ipu_autotune.cli import main
from ipu_autotune.export.ipu_config import ipu_config
from ipu_autotune.export.trainer import render_trainer
from ipu_autotune.guide.warmstart import naive_baseline
from ipu_autotune.problem import Problem
from ipu_autotune.profiles.optimum_placement import optimum_placed
from ipu_autotune.profiles.placement import optimum_checkpoints
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.optimum_target import unexpressible
from ipu_autotune.search.knobs import Choice
from ipu_autotune.search.space import SearchSpace

FP16 = dict(precision="16.16", partials="half", stochastic_rounding=True, optimizer_state="half")


def t5(tmp_path: Path, ipus: int, **changes: Any) -> Problem:
    # a folder per config: a model's config is read once per process (hf_config._loaded)
    folder = tmp_path / ("t5" + "".join(f"-{k}{v}" for k, v in changes.items()))
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**CONFIGS["t5"], **changes}))
    return Problem(f"hf:{folder}", 2, seq_len=64, ipus=ipus, trainer="optimum")


@pytest.mark.parametrize("ipus, layers_per_ipu", [(2, [3, 3]), (4, [1, 1, 1, 3])])
def test_t5_baseline_under_optimum_splits_at_blocks_as_layers_per_ipu_wildcard(
    tmp_path: Path, ipus: int, layers_per_ipu: list[Any]
) -> None:
    """4 encoder + 2 decoder blocks are one list of 6 layers (get_layer_ipu(ipu_config,
    num_encoder_layers + num_decoder_layers)); the newcomer's [-1] gives each IPU 6 // n and
    the remainder to the last."""
    problem = t5(tmp_path, ipus)
    profile = profile_for(problem)
    baseline = naive_baseline(problem, profile)
    assert all(
        p.split(".")[0] in ("encoder", "decoder") and p.split(".")[1] == "block"
        for p in baseline.splits
    )
    assert not unexpressible(problem, baseline)
    exported = ipu_config(problem, baseline, profile)
    assert exported["layers_per_ipu"] == layers_per_ipu and sum(layers_per_ipu) == 4 + 2
    # The PopTorch target's baseline is unchanged: by unit count, at encoder.final_layer_norm
    # for 2 IPUs, which optimum cannot place (the rules say so).
    poptorch = Problem(problem.model, 2, seq_len=64, ipus=ipus)
    if ipus == 2:
        assert naive_baseline(poptorch, profile).splits == ("encoder.final_layer_norm",)
        assert "layers_per_ipu splits at layers only" in " ".join(
            unexpressible(problem, naive_baseline(poptorch, profile))
        )


def test_t5_checkpoints_skip_the_block_at_num_layers_minus_1_in_both_stacks(
    tmp_path: Path,
) -> None:
    """`index != self.config.num_layers - 1` in both loops: with 4 encoder and 4 decoder
    blocks, encoder.block.3 and decoder.block.3 keep no checkpoint; with 2 decoder blocks every
    decoder block keeps one."""
    for decoder_layers, skipped in (
        (4, {"encoder.block.3", "decoder.block.3"}),
        (2, {"encoder.block.3"}),
    ):
        problem = t5(tmp_path, 1, num_decoder_layers=decoder_layers)
        profile = profile_for(problem)
        blocks = {u.path for u in profile.units if ".block." in u.path}
        assert set(optimum_checkpoints(profile)) == blocks - skipped


def test_an_untied_t5_head_is_estimated_on_ipu0_under_optimum(tmp_path: Path) -> None:
    """optimum puts T5's lm_head on IPU 0 tied or not (PipelinedT5ForConditionalGeneration.
    parallelize: BeginBlock(self.lm_head, "LM Head Output", ipu_id=0)); under --trainer optimum
    the estimate does too (optimum_placement.ON_IPU0). transformers 5 always ties T5's head
    (T5Config forces tie_word_embeddings), so the untied head of a 4.x build is made by hand."""
    problem = t5(tmp_path, 2)
    profile = profile_for(problem)
    untied = dataclasses.replace(
        profile, units=[dataclasses.replace(u, placed_with=None) for u in profile.units]
    )
    placed = optimum_placed(untied)
    assert [u.path for u in placed.units if u.placed_with == 0] == ["lm_head"]


def test_the_optimum_space_draws_t5_splits_at_blocks_and_replays_them(tmp_path: Path) -> None:
    problem = t5(tmp_path, 4)
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen: set[str] = set()
    for _ in range(40):
        config = space.sample(study.ask(), problem, profile)
        assert all(".block." in p for p in config.splits), config.splits
        seen.update(config.splits)
        if config.splits:
            replay = optuna.create_study()
            replay.enqueue_trial(space.params_for(problem, profile, config))
            assert space.sample(replay.ask(), problem, profile).splits == config.splits
    assert any(p.startswith("decoder.") for p in seen) and any(
        p.startswith("encoder.") for p in seen
    )


# --- ViT: PipelinedViTForImageClassification ---------------------------------------------------


def vit(tmp_path: Path) -> Problem:
    return Problem(write_config(tmp_path, "vit"), 4, ipus=2, trainer="optimum")


def test_vit_trainer_block_is_an_image_classifier_with_pixel_values_and_labels(
    tmp_path: Path,
) -> None:
    problem = vit(tmp_path)
    profile = profile_for(problem)
    config = naive_baseline(problem, profile).replace(**FP16)
    assert not unexpressible(problem, config)
    assert ipu_config(problem, config, profile)["layers_per_ipu"] == [2, 2]
    block = render_trainer(problem, config)
    tree = ast.parse(block)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert (
        "AutoModelForImageClassification" in imported
        and "AutoModelForSequenceClassification" not in imported
    )
    # the collator's batch, run: IPUTrainer takes float pixel_values and integer labels
    ns: dict[str, Any] = {}
    exec(
        compile(
            "import torch\n"
            + not_none(
                ast.get_source_segment(
                    block,
                    next(
                        n
                        for n in tree.body
                        if isinstance(n, ast.FunctionDef) and n.name == "collate_images"
                    ),
                )
            ),
            "b",
            "exec",
        ),
        ns,
    )
    batch = ns["collate_images"]([{"pixel_values": [[[0.5] * 2] * 2] * 3, "labels": 7}] * 2)
    assert set(batch) == {"pixel_values", "labels"}
    assert (
        tuple(batch["pixel_values"].shape) == (2, 3, 2, 2)
        and batch["pixel_values"].is_floating_point()
    )
    assert batch["labels"].tolist() == [7, 7]
    train = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert ast.unparse(train.args.defaults[-1]) == "collate_images"


def test_vit_eight_bit_io_is_refused_in_one_line_and_not_searched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = vit(tmp_path)
    eight_bit_io = SearchSpace.load(problem).knobs["eight_bit_io"]
    assert isinstance(eight_bit_io, Choice) and eight_bit_io.values == (False,)
    config_file = tmp_path / "vit.toml"
    config_file.write_text(
        f'[problem]\nmodel = "{problem.model}"\nbatch_size = 4\nipus = 2\ntrainer = "optimum"\n'
        '[config]\nipus_per_replica = 2\nsplits = ["vit.layers.2"]\ngradient_accumulation = 8\n'
        "eight_bit_io = true\n"
    )
    assert main(["estimate", "--config", str(config_file)]) == 2
    err = capsys.readouterr().err
    assert "8-bit image I/O" in err and len(err.strip().splitlines()) == 1, err


def test_an_image_classifier_optimum_does_not_pipeline_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "deit"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            dict(
                model_type="deit",
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=128,
                image_size=32,
                patch_size=16,
            )
        )
    )
    assert main(["estimate", f"hf:{folder}", "-b", "2", "--trainer", "optimum"]) == 2
    err = capsys.readouterr().err
    assert (
        "pipelines no deit image-classification model" in err
        and len(err.strip().splitlines()) == 1
    ), err
