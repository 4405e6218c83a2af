"""--max-predictions: masked-LM pretraining as Graphcore runs it (the head over the gathered
masked positions only), the same computation in the traced model and in the exported
TrainingModel, and a masked-LM loss equal to transformers' own over those positions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_transformers import cli
from testing import run_cli_stdout

from ipu_autotune.errors import UsageError
from ipu_autotune.models.hf import build_hf_model
from ipu_autotune.models.inputs import sample_batch
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for


def _head(profile: Any) -> Any:
    return next(u for u in profile.units if u.path.startswith("cls"))


@pytest.mark.slow
def test_the_head_sees_only_the_gathered_positions() -> None:
    full = profile_for(Problem("hf:bert-base-uncased", 4, task="masked-lm", seq_len=128))
    gathered = profile_for(
        Problem("hf:bert-base-uncased", 4, task="masked-lm", seq_len=128, max_predictions=20)
    )
    assert gathered.params == full.params  # the same weights; only what the head computes changes
    # What crosses into the head: 4 x 20 hidden states (FP32 trace), not 4 x 128.
    assert _head(gathered).in_bytes == 4 * 20 * 768 * 4
    assert _head(full).in_bytes == 4 * 128 * 768 * 4
    ratio = _head(gathered).flops["matmul"] / _head(full).flops["matmul"]
    assert ratio == pytest.approx(20 / 128, rel=0.01)
    assert _head(gathered).placed_with == 0  # the tied decoder still runs with the embedding


def test_inputs_and_labels_follow_graphcore_pretraining() -> None:
    problem = Problem("hf:bert-base-uncased", 3, task="masked-lm", seq_len=128, max_predictions=20)
    batch = sample_batch(problem, 3)
    assert list(batch) == ["input_ids", "attention_mask", "masked_lm_positions", "labels"]
    assert batch["masked_lm_positions"].shape == (3, 20) and batch["labels"].shape == (3, 20)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(model="hf:bert-base-uncased", task="sequence-classification", max_predictions=20),
            "--task masked-lm",
        ),
        (
            dict(model="hf:distilbert-base-uncased", task="masked-lm", max_predictions=20),
            "bert, roberta",
        ),
        (
            dict(model="hf:bert-base-uncased", task="masked-lm", seq_len=16, max_predictions=20),
            "exceeds --seq-len 16",
        ),
        (dict(model="resnet18", max_predictions=20), "for hf: models"),
    ],
)
def test_max_predictions_where_it_cannot_apply_is_refused(kwargs: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Problem(batch_size=1, **kwargs)


def test_the_key_round_trips_and_old_problems_keep_their_dict() -> None:
    problem = Problem("hf:roberta-base", 2, task="masked-lm", seq_len=128, max_predictions=20)
    assert Problem.from_dict(problem.to_dict()) == problem
    assert "max_predictions" not in Problem("hf:roberta-base", 2, task="masked-lm").to_dict()
    assert problem.slug != Problem("hf:roberta-base", 2, task="masked-lm", seq_len=128).slug


def _reference_loss(plain: Any, ids: Any, mask: Any, positions: Any, tokens: Any) -> Any:
    """transformers' BertForMaskedLM loss: every position projected, labels only where masked."""
    labels = torch.full_like(ids, -100)
    labels.scatter_(1, positions, tokens)
    return plain(input_ids=ids, attention_mask=mask, labels=labels).loss


@pytest.mark.slow
def test_traced_model_and_exported_training_model_compute_transformers_masked_lm_loss() -> None:
    from conftest_fake_sdk import fake_sdk

    from ipu_autotune.export.python import render_snippet

    torch.manual_seed(0)
    problem = Problem("hf:bert-base-uncased", 2, task="masked-lm", seq_len=16, max_predictions=3)
    config = Config(ipus_per_replica=2, splits=("bert.encoder.layer.6",), gradient_accumulation=4)
    gathered = build_hf_model(
        problem.model, "masked-lm", 2, device="cpu", max_predictions=3
    ).eval()
    plain = build_hf_model(problem.model, "masked-lm", 2, device="cpu").eval()
    plain.load_state_dict(gathered.state_dict())
    ids = torch.randint(0, 30522, (2, 16))
    mask = torch.ones_like(ids)
    positions = torch.tensor([[1, 5, 9], [0, 7, 15]])
    tokens = torch.randint(0, 30522, (2, 3))

    ours = gathered(
        input_ids=ids, attention_mask=mask, masked_lm_positions=positions, labels=tokens
    ).loss
    with torch.no_grad():
        reference = _reference_loss(plain, ids, mask, positions, tokens)
    assert ours.item() == pytest.approx(reference.item(), rel=1e-5)

    snippet = render_snippet(problem, config)
    assert "masked_lm_positions" in snippet
    with fake_sdk():
        ns: dict[str, Any] = {}
        exec(compile(snippet, "best_options.py", "exec"), ns)
        exported = ns["TrainingModel"](plain)
        assert exported(ids, mask, positions, tokens).item() == pytest.approx(
            ours.item(), rel=1e-5
        )


@pytest.mark.slow
def test_estimate_takes_the_flag_and_the_config_key(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    """In this process: the three estimates share one trace of BERT (`estimate` as the console
    script runs it is test_transformers.py's)."""
    import json

    def estimate(*argv: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(run_cli_stdout(capsys, "estimate", *argv))
        return out

    config = (
        "--set",
        "ipus_per_replica=4",
        "--set",
        "splits=bert.encoder.layer.0,bert.encoder.layer.4,bert.encoder.layer.8",
        "--json",
    )
    problem = ("hf:bert-base-uncased", "-b", "8", "--task", "masked-lm", "--ipus", "4")
    flag = estimate(*problem, "--max-predictions", "20", *config)
    (in_tmp / "p.toml").write_text(
        '[problem]\nmodel = "hf:bert-base-uncased"\nbatch_size = 8\n'
        'task = "masked-lm"\nmax_predictions = 20\nipus = 4\n'
    )
    key = estimate("--config", "p.toml", *config)
    every = estimate(*problem, *config)
    assert flag["max_tile_bytes"] == key["max_tile_bytes"]
    assert flag["max_tile_bytes"][0] < every["max_tile_bytes"][0]  # the head is on IPU0


@pytest.mark.slow
def test_a_bad_count_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = cli(
        "estimate", "hf:gpt2", "-b", "1", "--max-predictions", "20", cwd=tmp_path, check=False
    )
    assert proc.returncode == 2 and "--task masked-lm" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
