"""`plan` agrees with the tool's own search (issue 59): each row is at least what `tune --ipus N`
finds on the estimate backend with its default trials, with the same numerics; the "tune it"
command it prints opens a study of the very problem it planned."""

from __future__ import annotations

import html
import json
import shlex
from itertools import pairwise
from typing import Any

import optuna
import pytest
from testing import not_none, run_cli, run_cli_stdout

from ipu_autotune.options import DEFAULT_TRIALS
from ipu_autotune.problem import Problem
from ipu_autotune.study import planning
from ipu_autotune.study.records import stored_problem

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "model,batch",
    [
        ("resnet50", 16),
        ("resnet101", 64),
        ("vit_b_16", 4),
        ("hf:bert-base-uncased", 8),
        ("hf:gpt2", 4),
    ],
)
def test_each_row_is_at_least_what_tune_finds_at_that_size_with_the_same_numerics(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, model: str, batch: int
) -> None:
    rows = planning.plan(Problem(model, batch), 0.05, 0.9, (1, 2, 4, 8))
    assert [r.ipus for r in rows] == [1, 2, 4, 8]
    for row in rows:  # tune of the row's problem: its size, at the micro-batch the row fits at
        code, out, err = run_cli(
            capsys,
            model,
            "--batch-size",
            str(row.micro_batch),
            "--ipus",
            str(row.ipus),
            "--backend",
            "estimate",
            "--storage",
            "memory:",
            "--seed",
            "0",
            "--json",
        )
        assert code in (0, 3), err[-2000:]
        tuned = json.loads(out)
        assert tuned["trials_run"] == DEFAULT_TRIALS
        best = tuned["best"]
        if best is None:  # tune finds nothing there either: neither does the plan
            assert not row.fits, (model, row.ipus)
            continue
        assert row.fits, (model, row.ipus)
        ratio = row.measurement.throughput / best["measurement"]["throughput"]
        with capsys.disabled():  # the figures, with -s
            print(
                f"{model} {row.ipus} IPUs mb {row.micro_batch}: plan "
                f"{row.measurement.throughput:,.0f}, tune "
                f"{best['measurement']['throughput']:,.0f}, {ratio:.3f}x"
            )
        assert ratio >= 0.95, (model, row.ipus, ratio, row.config, best["config"])
        advice = tuned["numerics"]
        if advice is not None and row.config.half_compute:  # the one answer, applied to the row
            assert (
                row.config.loss_scaling == advice["loss_scale"]["scale"]
                or advice["loss_scale"]["auto"]
            )
            assert row.config.stochastic_rounding == (
                advice["stochastic_rounding"]["recommend"] and row.config.half_weights
            )


def test_the_printed_tune_command_opens_a_study_of_the_planned_problem(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    # flags off their defaults: the sequence length (issue 59: bart-large's --seq-len 512 was
    # dropped), the task, the optimizer; each is part of the problem's key
    argv = [
        "hf:tiny-gpt",
        "-b",
        "4",
        "--seq-len",
        "64",
        "--task",
        "causal-lm",
        "--optimizer",
        "sgd",
    ]
    (in_tmp / "tiny-gpt").mkdir()
    (in_tmp / "tiny-gpt" / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["GPT2LMHeadModel"],
                "model_type": "gpt2",
                "n_embd": 64,
                "n_head": 2,
                "n_layer": 2,
                "n_positions": 256,
                "vocab_size": 1000,
            }
        )
    )
    planned = json.loads(
        run_cli_stdout(capsys, "plan", *argv, "--json", "-o", str(in_tmp / "plan.html"))
    )
    command = planned["tune_command"]
    assert command is not None and command.startswith("ipu-autotune ")
    page = html.unescape(
        (in_tmp / "plan.html").read_text()
    )  # the page shows what the terminal shows
    assert (
        "<th>chance</th>" in page
        and f"tune it: {command}" in page
        and "smallest size that fits" in page
    )
    fit = next(s for s in planned["sizes"] if s["fits"])
    expected = Problem.from_dict(
        {**planned["problem"], "ipus": fit["ipus"], "batch_size": fit["micro_batch"]}
    )
    storage = f"sqlite:///{in_tmp / 'handed.db'}"
    words = shlex.split(command)[1:]
    code, _, err = run_cli(
        capsys, *words, "--trials", "1", "--storage", storage, "--quiet", "--no-numerics"
    )
    assert code in (0, 3), err
    [summary] = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    assert stored_problem(study) == expected
    assert summary.study_name == expected.slug


#: published config.json fields (microsoft/phi-2, mistralai/Mistral-7B-v0.1, facebook/bart-large)
#: beside examples/hf_configs' TinyLlama-1.1B, OPT-1.3b, BLOOM-560m and GPT-2 large
PHI_2 = {
    "architectures": ["PhiForCausalLM"],
    "model_type": "phi",
    "hidden_size": 2560,
    "intermediate_size": 10240,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 2048,
    "vocab_size": 51200,
    "partial_rotary_factor": 0.4,
    "hidden_act": "gelu_new",
    "layer_norm_eps": 1e-05,
    "tie_word_embeddings": False,
}
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 32768,
    "vocab_size": 32000,
    "sliding_window": 4096,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}
BART_LARGE = {
    "architectures": ["BartForConditionalGeneration"],
    "model_type": "bart",
    "d_model": 1024,
    "encoder_layers": 12,
    "decoder_layers": 12,
    "encoder_attention_heads": 16,
    "decoder_attention_heads": 16,
    "encoder_ffn_dim": 4096,
    "decoder_ffn_dim": 4096,
    "vocab_size": 50265,
    "max_position_embeddings": 1024,
}
SEVEN = [
    ("tinyllama-1.1b", 1, 2048),
    ("phi-2", 1, 2048),
    ("mistral-7b", 1, 2048),
    ("opt-1.3b", 1, 2048),
    ("bloom-560m", 1, 512),
    ("bart-large", 8, 512),
    ("gpt2-large", 1, 1024),
]
#: the monotone fit comes from the carried start (a larger size searches from the smaller one's
#: best), not from the trial count: a few trials past the warm starts keep this test cheap
FEW_TRIALS = 8


def write_configs(folder: Any) -> None:
    import shutil
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "examples" / "hf_configs"
    for name in ("tinyllama-1.1b", "opt-1.3b", "bloom-560m", "gpt2-large"):
        shutil.copytree(examples / name, folder / name)
    for name, fields in (("phi-2", PHI_2), ("mistral-7b", MISTRAL_7B), ("bart-large", BART_LARGE)):
        (folder / name).mkdir()
        (folder / name / "config.json").write_text(json.dumps(fields))


@pytest.mark.parametrize("name,batch,seq", SEVEN)
def test_no_size_fits_where_a_larger_one_does_not_and_a_rising_tile_says_why(
    in_tmp: Any, name: Any, batch: Any, seq: Any
) -> None:
    write_configs(in_tmp)
    rows = planning.plan(Problem(f"hf:{name}", batch, seq_len=seq), 0.05, 0.9, trials=FEW_TRIALS)
    assert rows
    for smaller, larger in pairwise(rows):
        if smaller.fits:  # what fits on N IPUs fits on 2N, at a micro-batch at least as large
            assert larger.fits and larger.micro_batch >= smaller.micro_batch, (
                name,
                smaller.ipus,
                larger.ipus,
            )
        low, high = not_none(smaller.measurement.max_tile_bytes_interval)[
            smaller.measurement.worst_ipu() or 0
        ]
        if (
            max(larger.measurement.max_tile_bytes) > high
        ):  # busier beyond the bar: the row says why
            assert "busiest tile" in larger.why, (name, larger.ipus, larger.why)
        per_ipu = [
            r.measurement.throughput / r.ipus
            for r in (smaller, larger)
            if r.fits and r.measurement.throughput
        ]
        if (
            len(per_ipu) == 2 and per_ipu[1] < 0.99 * per_ipu[0]
        ):  # slower per IPU: the row says why
            assert larger.why, (name, larger.ipus)
