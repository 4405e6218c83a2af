"""--attention-dropout: the dropout on attention probabilities of an hf: model, set in the
model the estimate traces and checked by the exported code (Graphcore pretrains BERT with 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_transformers import cli

from ipu_autotune.errors import UsageError
from ipu_autotune.export.python import render_snippet
from ipu_autotune.models.hf import build_hf_model
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for


@pytest.mark.slow
def test_no_attention_dropout_saves_no_dropout_masks() -> None:
    kept = profile_for(Problem("hf:bert-base-uncased", 2, task="masked-lm", seq_len=512))
    none = profile_for(
        Problem("hf:bert-base-uncased", 2, task="masked-lm", seq_len=512, attention_dropout=0.0)
    )
    assert none.params == kept.params
    layer = next(i for i, u in enumerate(kept.units) if u.path == "bert.encoder.layer.3")
    # one attention map (2 x 12 x 512 x 512) less to save per layer, at least: the dropout's output
    attention_map = 2 * 12 * 512 * 512 * 4
    assert kept.units[layer].saved_bytes - none.units[layer].saved_bytes >= attention_map


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(model="hf:t5-small", attention_dropout=0.0), "no separate attention dropout"),
        (dict(model="resnet18", attention_dropout=0.0), "are for hf: models"),
    ],
)
def test_where_it_cannot_apply_it_is_refused(kwargs: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Problem(batch_size=1, **kwargs)


def test_the_key_round_trips_and_an_unset_one_stays_out_of_the_dict() -> None:
    problem = Problem("hf:gpt2", 1, task="causal-lm", attention_dropout=0.0)
    assert Problem.from_dict(problem.to_dict()) == problem
    assert "attention_dropout" not in Problem("hf:gpt2", 1).to_dict()


@pytest.mark.slow
def test_a_probability_out_of_range_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(
        '[problem]\nmodel = "hf:bert-base-uncased"\nbatch_size = 2\nattention_dropout = 1.5\n'
    )
    proc = cli("estimate", "--config", "p.toml", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "'attention_dropout' must be a probability" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_exported_code_checks_the_model_it_is_given() -> None:
    from conftest_fake_sdk import fake_sdk

    problem = Problem(
        "hf:bert-base-uncased", 2, task="masked-lm", seq_len=16, attention_dropout=0.0
    )
    snippet = render_snippet(problem, Config())
    with fake_sdk():
        ns: dict[str, Any] = {}
        exec(compile(snippet, "best_options.py", "exec"), ns)
        ns["TrainingModel"](
            build_hf_model(problem.model, "masked-lm", 2, device="cpu", attention_dropout=0.0)
        )
        with pytest.raises(AssertionError, match="attention dropout 0"):
            ns["TrainingModel"](build_hf_model(problem.model, "masked-lm", 2, device="cpu"))
