"""Transformers and factories with named inputs compile through the PopTorch backend (issue 12).

The trial child feeds what the snippet's TrainingModel takes: token ids and a mask as integers
(never cast to the compute dtype), then the labels the task's loss needs. Through the fake SDK,
which binds the arguments by the forward's names as PopTorch's args parser does, the Config
rebuilt from what PopTorch saw equals the one exported, knob for knob.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest_fake_sdk import fake_env, fake_sdk
from test_knobs_honoured import assert_same_knobs, seen_by_poptorch

from ipu_autotune.backends.poptorch import child
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace


@pytest.fixture(scope="module")
def poptorch() -> Iterator[Any]:
    with fake_sdk() as module:
        yield module


def warm_starts(p: Problem, n: int = 3) -> list[Config]:
    profile = profile_for(p)
    return [
        w.config
        for w in proposals(p, profile, SearchSpace.load(p), naive_baseline(p, profile))[:n]
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, task, max_predictions",
    [
        ("hf:bert-base-uncased", "sequence-classification", 0),
        ("hf:bert-base-uncased", "masked-lm", 0),
        # Graphcore's pretraining model: the TrainingModel gathers the masked positions before the
        # head, which the net inside it cannot do alone; PopTorch traces the whole TrainingModel.
        ("hf:bert-base-uncased", "masked-lm", 5),
        ("hf:bert-base-uncased", "question-answering", 0),
        ("hf:gpt2", "causal-lm", 0),
    ],
)
def test_transformer_configs_are_what_poptorch_sees(
    poptorch: Any, tmp_path: Path, model: str, task: str, max_predictions: int
) -> None:
    p = Problem(model, 2, seq_len=32, task=task, ipus=4, max_predictions=max_predictions)
    for i, c in enumerate(warm_starts(p)):
        assert_same_knobs(
            c, seen_by_poptorch(poptorch, p, c, tmp_path / str(i)), f"{model} {task} #{i}"
        )


def test_the_host_batch_keeps_token_ids_integer_and_labels_last() -> None:
    p = Problem("hf:bert-base-uncased", 2, seq_len=16, task="question-answering", ipus=2)
    c = Config(precision="16.16", gradient_accumulation=4, device_iterations=3)
    ids, mask, start, end = child.host_batch(p, c, torch.half)
    n = 2 * 4 * 3
    assert ids.shape == mask.shape == (n, 16) and start.shape == end.shape == (n,)
    assert ids.dtype == mask.dtype == torch.int64 and bool(mask.all())


@pytest.mark.slow
def test_a_factory_with_named_inputs_is_what_poptorch_sees(poptorch: Any, tmp_path: Path) -> None:
    p = Problem(
        "test_transformers:two_inputs",
        4,
        inputs=("input_ids:32:int64", "attention_mask:32:float32"),
        num_classes=5,
        ipus=2,
    )
    ids, mask, labels = child.host_batch(p, Config(precision="16.16"), torch.half)
    assert ids.dtype == torch.int64 and mask.dtype == torch.float32 and labels.dtype == torch.long
    for i, c in enumerate(warm_starts(p)):
        assert_same_knobs(
            c, seen_by_poptorch(poptorch, p, c, tmp_path / str(i)), f"two_inputs #{i}"
        )


@pytest.mark.slow
def test_tune_compiles_a_transformer_through_the_poptorch_backend(tmp_path: Path) -> None:
    """`tune hf:... --backend poptorch`: every compile ends in a verdict on the configuration
    (fits or out of memory), none in an error about the inputs."""
    env = dict(os.environ, **fake_env())
    cmd = [
        sys.executable,
        "-m",
        "ipu_autotune",
        "tune",
        "hf:bert-base-uncased",
        "--seq-len",
        "32",
        "--batch-size",
        "2",
        "--ipus",
        "2",
        "--backend",
        "poptorch",
        "--trials",
        "2",
        "--quiet",
    ]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = sorted(tmp_path.glob("ipu-autotune-out/**/trial-*/result.json"))
    assert results, "no trial compiled"
    statuses = [json.loads(r.read_text())["status"] for r in results]
    assert all(s in ("ok", "oom") for s in statuses), statuses


@pytest.mark.slow
def test_a_tied_head_back_on_ipu0_is_a_pipeline_stage_of_its_own(
    poptorch: Any, tmp_path: Path
) -> None:
    """GPT-2's LM head shares the embedding's weights and runs on IPU0 after IPU3: PopTorch
    counts 5 forward stages, so accumulation must be >= 9, not the 7 of 4 IPUs. The fake counts
    stages from the blocks it sees; the rules and the baseline must agree with it."""
    from ipu_autotune.rules.cross_field import min_pipeline_accumulation, violations

    p = Problem("hf:gpt2", 1, seq_len=32, task="causal-lm", ipus=4)
    profile = profile_for(p)
    baseline = naive_baseline(p, profile)
    assert baseline.pipelined and baseline.ipus_per_replica == 4
    assert min_pipeline_accumulation(p, 4) == 9 == baseline.gradient_accumulation
    short = baseline.replace(gradient_accumulation=8)
    assert any("tied head" in v for v in violations(p, short, profile.module_order))
    ns: dict[str, Any] = {}
    from ipu_autotune.export.python import render_snippet
    from ipu_autotune.models.zoo import build_model

    for c, fails in ((short, True), (baseline, False)):
        exec(render_snippet(p, c), ns)
        model = ns["TrainingModel"](build_model(p.model, p.num_classes, device="cpu", task=p.task))
        opts = ns["make_options"]()
        child.add_tuner_options(
            opts, poptorch, {"report_dir": str(tmp_path / str(fails))}, p, hardware=False
        )
        training = poptorch.trainingModel(model, opts, ns["make_optimizer"](model))
        try:
            training.compile(*child.host_batch(p, c, ns.get("INPUT_DTYPE", torch.float)))
            error = ""
        except poptorch.Error as exc:
            error = str(exc)
        assert training.fake_record["forward_stages"] == 5
        assert ("number of pipeline stages (9)" in error) == fails, error
    # BERT's sequence classifier is not tied: 4 IPUs, 4 stages.
    assert (
        min_pipeline_accumulation(Problem("hf:bert-base-uncased", 2, seq_len=32, ipus=4), 4) == 7
    )
