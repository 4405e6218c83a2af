"""Transformers as IPU users train them: hf: models built offline, named inputs, layer units,
parameters charged where they are read (tied ones once), and the must-show tuning runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from testing import not_none, run_cli_process, run_cli_stdout
from torch import nn

from ipu_autotune.errors import UsageError
from ipu_autotune.models.hf import ARCHITECTURES, build_hf_model, layer_count, layer_stacks
from ipu_autotune.models.inputs import parse_input, parse_inputs
from ipu_autotune.problem import Problem, load_config_file
from ipu_autotune.profiles.trace import profile_for, trace_model


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli_process(*args, cwd=cwd, columns=120, check=check)


def unique_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once


# --- models ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, stacks",
    [
        ("bert-base-uncased", ("bert.encoder.layer",)),
        ("gpt2", ("transformer.h",)),
        ("t5-small", ("encoder.block", "decoder.block")),
        ("distilbert-base-uncased", ("distilbert.transformer.layer",)),
        ("roberta-base", ("roberta.encoder.layer",)),
    ],
)
def test_hf_models_trace_at_layer_units_with_every_parameter_once(
    name: str, stacks: tuple[Any, ...]
) -> None:
    problem = Problem(f"hf:{name}", 2, seq_len=64)
    profile = profile_for(problem)
    model = build_hf_model(problem.model, problem.task, problem.num_classes)
    assert profile.params == unique_params(model)
    # The repeated blocks are found in the built model, and each is a unit: a place where a
    # stage may begin.
    assert layer_stacks(problem.model, problem.task) == stacks
    layer_units = [
        u
        for u in profile.units
        if u.path.rsplit(".", 1)[0] in stacks and u.path.rsplit(".", 1)[-1].isdigit()
    ]
    assert (
        len(layer_units)
        == layer_count(problem.model)
        == {"distilbert-base-uncased": 6, "t5-small": 12, "gpt2": 12}.get(name, 12)
    )


def test_published_sizes() -> None:
    """The tabulated architectures build the published parameter counts."""
    counts = {
        "bert-base-uncased": 110e6,
        "bert-large-uncased": 336e6,
        "gpt2": 124.4e6,
        "gpt2-medium": 355e6,
        "roberta-base": 125e6,
        "t5-small": 60.5e6,
        "distilbert-base-uncased": 66e6,
    }
    for name, expected in counts.items():
        # The masked-LM / LM head: what the checkpoint holds (no new classifier).
        task = {"bert": "masked-lm", "roberta": "masked-lm", "distilbert": "masked-lm"}.get(
            ARCHITECTURES[name].family, ""
        )
        model = build_hf_model(f"hf:{name}", task, 2)
        assert unique_params(model) == pytest.approx(expected, rel=0.03), name


def test_gpt2_tied_head_is_counted_once_with_the_embedding() -> None:
    profile = profile_for(Problem("hf:gpt2", 1, task="causal-lm", seq_len=128))
    assert profile.params == 124_439_808  # not 163M: lm_head.weight is transformer.wte.weight
    by_path = {u.path: u for u in profile.units}
    # Token and position embeddings form one unit (no split between them), with the tied head's
    # weight.
    assert by_path["transformer.wte"].params == 50257 * 768 + 1024 * 768
    assert "transformer.wpe" in by_path["transformer.wte"].members
    assert by_path["lm_head"].placed_with == 0  # runs with the embedding, on IPU0
    assert by_path["lm_head"].params == 0
    assert by_path["lm_head"].flops["matmul"] > 0  # but the vocabulary projection runs there


def test_a_tied_head_is_a_pipeline_stage_in_the_estimate_too() -> None:
    """GPT-2's head runs on IPU0 after IPU3: 5 forward stages on 4 IPUs. Every stash is as deep
    as 5 stages make it, IPU3 is no longer the last stage (it keeps a stash, its output goes
    back to IPU0), and the head itself (forward and backward in one cycle) is not stashed."""
    from ipu_autotune.backends.estimate import EstimateBackend
    from ipu_autotune.backends.estimate.layout import forward_stages, stages
    from ipu_autotune.problem import Config
    from ipu_autotune.rules.cross_field import min_pipeline_accumulation, pipeline_stages

    def stashes(p: Any, layers: Any) -> Any:
        c = Config(
            precision="16.16",
            ipus_per_replica=4,
            recompute="none",
            splits=tuple(f"{layers}.{i}" for i in (3, 6, 9)),
            gradient_accumulation=min_pipeline_accumulation(p, 4),
        )
        layout = stages(profile_for(p), c)
        assert forward_stages(layout, c) == pipeline_stages(p, 4)
        m = EstimateBackend().measure(p, c)
        return layout, [b["stash"] for b in m.breakdown]

    gpt2 = Problem("hf:gpt2", 1, seq_len=64, task="causal-lm", ipus=4)
    layout, stash = stashes(gpt2, "transformer.h")
    assert pipeline_stages(gpt2, 4) == 5 and layout[0].returning_heads == 1
    assert stash[3] > 0
    ipu0 = layout[0]
    assert stash[0] == int(
        (2 * 5 - 2) * (ipu0.saved - ipu0.head_saved) * 0.5
    )  # FP16: half the FP32 trace
    bert = Problem("hf:bert-base-uncased", 2, seq_len=64, ipus=4)  # untied classifier: 4 stages
    layout, stash = stashes(bert, "bert.encoder.layer")
    assert layout[0].returning_heads == 0 and stash[3] == 0


def test_bert_through_a_wrapper_opens_to_layers() -> None:
    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = build_hf_model("hf:bert-base-uncased", "sequence-classification", 2)

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).logits

    from ipu_autotune.profiles.trace import trace_module

    inputs = {
        "input_ids": torch.zeros(2, 32, dtype=torch.long, device="meta"),
        "attention_mask": torch.ones(2, 32, dtype=torch.long, device="meta"),
    }
    with torch.device("meta"):
        model = Wrapped()
    profile = trace_module(model, 2, (32,), 2, inputs=inputs)
    paths = [u.path for u in profile.units]
    assert "bert.bert.encoder.layer.0" in paths and "bert.bert.encoder.layer.11" in paths
    assert profile.params == unique_params(model)


# --- must show 3: parameters charged to the unit that uses them ------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, blocks",
    [
        (
            "swin_b",
            [f"features.{s}.{b}" for s, n in ((1, 2), (3, 2), (5, 18), (7, 2)) for b in range(n)],
        ),
        ("vit_b_16", [f"encoder.layers.encoder_layer_{i}" for i in range(12)]),
    ],
)
def test_attention_parameters_sit_in_their_own_block(name: str, blocks: Any) -> None:
    profile = trace_model(name, 1, (3, 224, 224), 1000)
    model = torchvision.models.get_model(name)
    assert profile.params == unique_params(model)
    modules = dict(model.named_modules())
    by_path = {u.path: u for u in profile.units}
    for block in blocks:
        # Swin's qkv/proj and ViT's out_proj are read without calling their module. A norm
        # after the last block follows it (its members).
        unit = by_path[block]
        expected = unique_params(modules[block]) + sum(
            unique_params(modules[m]) for m in unit.members
        )
        assert unit.params == expected, block
    assert by_path[profile.units[0].path].params < 1e6  # the patch embedding alone


# --- inputs ------------------------------------------------------------------------------------


def test_input_specs_parse_from_strings_and_tables() -> None:
    assert str(parse_input("input_ids:128:int64")) == "input_ids:128:int64"
    assert parse_input("pixels:3x32x32").dtype == "float32"
    assert str(parse_input({"name": "mask", "shape": [4, 8], "dtype": "bool"})) == "mask:4x8:bool"
    for bad in ("ids", "ids:12a:int64", "ids:128:int8", "1x:128:int64", "ids:0:int64"):
        with pytest.raises(UsageError):
            parse_input(bad)
    with pytest.raises(UsageError, match="twice"):
        parse_inputs(["a:1:int64", "a:2:int64"])


class TwoInputs(nn.Module):
    """A token classifier whose forward takes integer ids and a float mask."""

    def __init__(self, num_classes: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(1000, 64)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(64, 4, 128, batch_first=True) for _ in range(4)
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        x = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(1))


def two_inputs(num_classes: int = 5) -> Any:
    return TwoInputs(num_classes)


@pytest.mark.slow
def test_a_factory_with_two_inputs_from_the_command_line_and_a_config_file(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    model = f"{__name__}:two_inputs"
    args = (
        "estimate",
        model,
        "--batch-size",
        "4",
        "--input",
        "input_ids:32:int64",
        "--input",
        "attention_mask:32:float32",
        "--json",
    )
    out = json.loads(run_cli_stdout(capsys, *args))
    assert out["problem"]["inputs"] == ["input_ids:32:int64", "attention_mask:32:float32"]
    profile = profile_for(Problem.from_dict(out["problem"]))
    assert [u.path for u in profile.units][1:5] == [f"layers.{i}" for i in range(4)]
    assert profile.params == unique_params(TwoInputs(1000))  # --num-classes default

    config = in_tmp / "two.toml"
    config.write_text(
        f'[problem]\nmodel = "{model}"\nbatch_size = 4\n'
        'inputs = [{name = "input_ids", shape = [32], dtype = "int64"}, '
        '"attention_mask:32:float32"]\n[config]\n'
    )
    assert not_none(load_config_file(config).problem).inputs == tuple(out["problem"]["inputs"])
    from_file = json.loads(run_cli_stdout(capsys, "estimate", "--config", str(config), "--json"))
    assert from_file["problem"] == out["problem"] and from_file["required_bytes"][0] > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (("hf:bert-base-uncasd", "-b", "8"), "did you mean hf:bert-base-uncased"),
        (("hf:gpt2", "-b", "1", "--seq-len", "2048"), "exceeds its 1024 position embeddings"),
        (("hf:t5-small", "-b", "1", "--task", "causal-lm"), "has no causal-lm head"),
        (("resnet18", "-b", "1", "--seq-len", "128"), "are for hf: models"),
        (("resnet18", "-b", "1", "--input", "ids:12:int8"), "dtype 'int8'"),
    ],
)
def test_bad_transformer_input_is_one_line_exit_2(
    tmp_path: Path, args: tuple[Any, ...], message: str
) -> None:
    proc = cli("estimate", *args, cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_numerics_says_plainly_it_takes_image_models_only(tmp_path: Path) -> None:
    proc = cli("numerics", "hf:gpt2", "-b", "1", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert (
        "token ids or named inputs" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    )


# --- must show 1: start out of memory, end on a fitting best split at layers -----------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, layer_prefix",
    [
        (
            ("hf:bert-base-uncased", "--seq-len", "128", "--batch-size", "8", "--ipus", "4"),
            "bert.encoder.layer.",
        ),
        (
            (
                "hf:gpt2",
                "--task",
                "causal-lm",
                "--seq-len",
                "1024",
                "--batch-size",
                "1",
                "--ipus",
                "4",
            ),
            "transformer.h.",
        ),
    ],
)
def test_must_show_runs_start_oom_and_end_fitting_at_layer_boundaries(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, args: tuple[Any, ...], layer_prefix: str
) -> None:
    result = json.loads(run_cli_stdout(capsys, *args, "--trials", "20", "--seed", "0", "--json"))
    base, best = result["baseline"], result["best"]
    assert not base["measurement"]["feasible"] and base["measurement"]["failure"] == "oom"
    assert best["measurement"]["feasible"]
    splits = best["config"]["splits"]
    assert splits and all(
        s.startswith(layer_prefix) and s.rsplit(".", 1)[1].isdigit() for s in splits
    )
    assert best["measurement"]["throughput"] > base["measurement"]["throughput"]


# --- must show 4: the optimum-graphcore IPUConfig export ----------------------------------------


@pytest.mark.slow
def test_bert_study_exports_an_ipu_config_and_a_snippet_that_runs_on_the_fake_sdk(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    from conftest_fake_sdk import fake_sdk

    from ipu_autotune.export.ipu_config import IPU_CONFIG_FIELDS

    def stdout(*argv: str) -> str:  # in this process: the study and its exports share one trace
        return run_cli_stdout(capsys, *argv)

    result = json.loads(
        stdout(
            "hf:bert-base-uncased",
            "--seq-len",
            "128",
            "--batch-size",
            "8",
            "--ipus",
            "4",
            "--trainer",
            "optimum",
            "--trials",
            "12",
            "--seed",
            "1",
            "--json",
        )
    )
    study = result["study"]
    exported = stdout("export", "--study", study, "--format", "ipu-config")
    ipu_config = json.loads(exported)
    assert set(ipu_config) <= IPU_CONFIG_FIELDS
    assert sum(ipu_config["layers_per_ipu"]) == 12
    assert (
        len(ipu_config["matmul_proportion"])
        == ipu_config["ipus_per_replica"]
        == result["best"]["config"]["ipus_per_replica"]
    )
    assert (
        ipu_config["gradient_accumulation_steps"]
        == result["best"]["config"]["gradient_accumulation"]
    )
    written = in_tmp / "ipu-autotune-out" / study / "ipu_config.json"
    assert json.loads(written.read_text()) == ipu_config

    snippet = stdout("export", "--study", study)
    with fake_sdk() as poptorch:
        ns: dict[str, Any] = {}
        exec(compile(snippet, "best_options.py", "exec"), ns)
        model = build_hf_model(
            "hf:bert-base-uncased", "sequence-classification", 1000, device="cpu"
        ).float()
        training = ns["TrainingModel"](model)
        opts = ns["make_options"]()
        wrapped = poptorch.trainingModel(training, opts, ns["make_optimizer"](training))
        assert wrapped is not None
        assert (
            opts.Training.gradient_accumulation
            == result["best"]["config"]["gradient_accumulation"]
        )
        # The annotated model still trains on the CPU: token ids in, the task's loss out.
        training.float()
        ids = torch.zeros(2, 16, dtype=torch.long)
        loss = training(ids, torch.ones_like(ids), torch.zeros(2, dtype=torch.long))
        assert loss.dim() == 0 and torch.isfinite(loss)


def test_tied_head_runs_on_the_embedding_ipu_and_the_snippet_places_it_there() -> None:
    from ipu_autotune.backends.estimate.layout import stages
    from ipu_autotune.export.python import render_snippet
    from ipu_autotune.problem import Config

    problem = Problem("hf:gpt2", 1, task="causal-lm", seq_len=128)
    profile = profile_for(problem)
    config = Config(
        precision="16.16",
        ipus_per_replica=4,
        gradient_accumulation=8,
        splits=("transformer.h.0", "transformer.h.4", "transformer.h.8"),
    )
    head = next(u for u in profile.units if u.path == "lm_head")
    first, *_, last = stages(profile, config)
    assert first.heavy_flops >= head.flops["matmul"]  # the 50257-way projection is on IPU0
    assert last.heavy_flops < head.flops["matmul"]
    snippet = render_snippet(problem, config)
    assert "poptorch.BeginBlock(model.get_submodule('lm_head'), ipu_id=0)" in snippet
    assert "AutoStage.AutoIncrement" in snippet


def test_ipu_config_says_checkpoint_every_layer_only_when_optimum_would_place_the_same() -> None:
    from ipu_autotune.export.ipu_config import NotAnIPUConfig, ipu_config
    from ipu_autotune.problem import Config

    problem = Problem("hf:bert-base-uncased", 8)
    profile = profile_for(problem)
    # optimum's BertForSequenceClassification: every layer but the model's last, layer 5 ending a
    # stage included (issue 46)
    layers = tuple(f"bert.encoder.layer.{i}" for i in range(11))
    config = Config(
        precision="16.16",
        partials="half",
        stochastic_rounding=True,
        optimizer_state="half",
        ipus_per_replica=2,
        gradient_accumulation=8,
        recompute="pipeline",
        splits=("bert.encoder.layer.6",),
        checkpoints=layers,
    )
    data = ipu_config(problem, config, profile)
    assert data["recompute_checkpoint_every_layer"] and data["layers_per_ipu"] == [6, 6]
    with pytest.raises(NotAnIPUConfig, match=r"6 of the 11 layers"):
        ipu_config(problem, config.replace(checkpoints=layers[::2]), profile)
    with pytest.raises(NotAnIPUConfig, match=r"not on bert\.encoder\.layer\.5\)"):
        ipu_config(
            problem,
            config.replace(checkpoints=tuple(p for p in layers if p != "bert.encoder.layer.5")),
            profile,
        )
