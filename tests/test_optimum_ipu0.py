"""--trainer optimum places each module where the pipelined class's parallelize() does (issue 23):
what it pins to IPU 0 with `BeginBlock(..., ipu_id=0)` beyond the embeddings, and nothing else
(huggingface/optimum-graphcore main, optimum/graphcore/models/):
- bart/modeling_bart.py, PipelinedBartForConditionalGeneration.parallelize: the decoder's
  embed_positions and layernorm_embedding ("Embedding", ipu_id=0) between the encoder's and the
  decoder's layers, and the lm_head;
- distilbert/modeling_distilbert.py, PipelinedDistilBertForMaskedLM.parallelize: vocab_transform,
  vocab_layer_norm and vocab_projector ("LM Head", ipu_id=0);
- deberta/modeling_deberta.py, DebertaPipelineMixin.parallelize: for the MLM class only
  cls.predictions.decoder ("Projection", ipu_id=0); cls.predictions.transform stays on the last
  layer's IPU.
The estimate's stages (units and parameters per IPU) must be those the exported IPUConfig trains,
as tests/optimum_reading.read_module_ipus reads it back; the PopTorch target keeps its placement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from optimum_reading import read_ipu_config, read_module_ipus
from test_hf_configs import offline  # noqa: F401 (offline: autouse fixture)
from test_optimum_checkpoints import problem_for

from ipu_autotune.backends.estimate.layout import forward_stages, stage_members, stages
from ipu_autotune.export.ipu_config import ipu_config
from ipu_autotune.export.python import tied_head_lines
from ipu_autotune.guide.warmstart import naive_baseline
from ipu_autotune.problem import Problem
from ipu_autotune.profiles.placement import is_layer
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import pipeline_stages
from ipu_autotune.rules.optimum_target import unexpressible

#: (family, task) -> (modules optimum pins to IPU 0, head modules it leaves on the last layer's
#: IPU)
CASES = {
    ("bart", "seq2seq-lm"): (
        ("model.decoder.embed_positions", "model.decoder.layernorm_embedding", "lm_head"),
        (),
    ),
    ("distilbert", "masked-lm"): (("vocab_transform", "vocab_layer_norm", "vocab_projector"), ()),
    ("deberta", "masked-lm"): (("cls.predictions.decoder",), ("cls.predictions.transform",)),
}


def runs(ipus: list[int]) -> int:
    return sum(1 for i, ipu in enumerate(ipus) if i == 0 or ipu != ipus[i - 1])


@pytest.mark.parametrize("ipus", [2, 3])
@pytest.mark.parametrize("family, task", list(CASES))
def test_optimum_modules_land_on_the_ipu_parallelize_puts_them(
    tmp_path: Path, family: Any, task: Any, ipus: int
) -> None:
    pinned, stays = CASES[family, task]
    problem = problem_for(tmp_path, family, task, ipus=ipus)
    profile = profile_for(problem)
    config = naive_baseline(problem, profile)
    assert config.pipelined and not unexpressible(problem, config)
    n = len(config.splits) + 1  # the IPUs the baseline uses
    data = ipu_config(problem, config, profile)
    # the estimate's stages: each unit and the modules folded into it on one IPU
    ours = {}
    for k, members in enumerate(stage_members(profile, config)):
        for i in members:
            ours.update({m: k for m in (profile.units[i].path, *profile.units[i].members)})
    run_order = [m for u in profile.units for m in (u.path, *u.members)]
    layers = [u.path for u in profile.units if is_layer(u.path)]
    theirs = read_module_ipus(data, problem, run_order, layers)
    assert ours == theirs
    assert all(theirs[m] == 0 for m in pinned)
    assert all(theirs[m] == n - 1 for m in stays)
    # memory on the right IPU: each stage holds the parameters of the units optimum puts there
    layout = stages(profile, config)
    assert [s.params for s in layout] == [
        sum(u.params for u in profile.units if theirs[u.path] == k) for k in range(n)
    ]
    # forward stages are the IPU runs in execution order; the rule's count bounds them
    assert forward_stages(layout, config) == runs([theirs[m] for m in run_order])
    assert forward_stages(layout, config) <= pipeline_stages(problem, n)
    # the IPUConfig read back puts the layers where the estimate does, and its head (the first
    # pinned module) on IPU 0
    placement = read_ipu_config(data, problem, layers, tied_head=True)
    assert placement.layer_ipu == tuple(ours[p] for p in layers)
    # the snippet places what the estimate does: BeginBlock on IPU0 and back
    lines = tied_head_lines(problem, config)
    assert any(f"'{pinned[0]}'), ipu_id=0)" in line for line in lines)


def test_poptorch_target_placement_is_unchanged(tmp_path: Path) -> None:
    """Without --trainer optimum: BART's decoder position embedding rides with the layer before
    it, DistilBERT's tied vocab_projector alone goes to IPU0, DeBERTa's whole MLM head does."""
    expected = {
        ("bart", "seq2seq-lm"): {"model.decoder.embed_positions": 1, "lm_head": 0},
        ("distilbert", "masked-lm"): {"vocab_transform": 1, "vocab_projector": 0},
        ("deberta", "masked-lm"): {"cls.predictions.transform": 0, "cls.predictions.decoder": 0},
    }
    for (family, task), where in expected.items():
        optimum = problem_for(tmp_path, family, task, ipus=2)
        problem = Problem(optimum.model, 2, seq_len=64, ipus=2, task=task)
        profile = profile_for(problem)
        config = naive_baseline(problem, profile)
        stage = {
            profile.units[i].path: k
            for k, members in enumerate(stage_members(profile, config))
            for i in members
        }
        assert {m: stage[m] for m in where} == where, family


@pytest.mark.parametrize("family, task", [("distilbert", "masked-lm"), ("deberta", "masked-lm")])
def test_read_ipu_config_checkpoints_follow_the_class_table(
    tmp_path: Path, family: str, task: str
) -> None:
    """recompute_checkpoint_every_layer read back per class (SKIPPED_INDEX): DistilBERT and
    DeBERTa MLM leave the last layer unchecked though their head is on IPU0."""
    problem = problem_for(tmp_path, family, task, ipus=1)
    profile = profile_for(problem)
    layers = [u.path for u in profile.units if is_layer(u.path)]
    data = {
        "layers_per_ipu": [len(layers)],
        "ipus_per_replica": 1,
        "matmul_proportion": [0.6],
        "recompute_checkpoint_every_layer": True,
        "embedding_serialization_factor": 1,
    }
    assert read_ipu_config(data, problem, layers, tied_head=True).checkpointed == frozenset(
        range(len(layers) - 1)
    )
