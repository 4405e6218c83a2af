"""What optimum-graphcore trains is what was estimated (issue 24).

Must show 1: one test per failure the issue lists (each fails on the code before it).
Must show 2: the IPUConfig written for BERT, GPT-2 and RoBERTa studies places layers, head,
checkpoints, memory proportions and serialisation as the same trial's snippet does, both read
back (tests/optimum_reading.py), field by field.
"""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest
from conftest_fake_sdk import fake_sdk
from optimum_reading import read_ipu_config, read_snippet, token_batch
from test_transformers import cli
from testing import not_none, run_cli_stdout

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.errors import UsageError
from ipu_autotune.export.ipu_config import NotAnIPUConfig, ipu_config
from ipu_autotune.export.python import render_snippet
from ipu_autotune.export.trainer import render_trainer
from ipu_autotune.knob_conditions import projection_factors as serialization_factors
from ipu_autotune.models.hf import build_hf_model
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.placement import optimum_checkpoints
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import check_problem, violations
from ipu_autotune.rules.optimum_target import ENGINE_OPTIONS, PATTERNS, POPART_OPTIONS

#: IPUTrainingArguments' own fields (optimum/graphcore/training_args.py) that a block may use,
#: and transformers' TrainingArguments fields it inherits that the block uses
TRAINING_ARGUMENT_FIELDS = {
    "output_dir",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "fp32",
    "loss_scaling",
    "auto_loss_scaling",
    "lamb",
    "dataloader_mode",
    "dataloader_num_workers",
    "dataloader_drop_last",
    "num_train_epochs",
    "max_steps",
    "seed",
}

BERT_MLM = Problem("hf:bert-base-uncased", 4, task="masked-lm", seq_len=32, ipus=4)
LAYERS = tuple(f"bert.encoder.layer.{i}" for i in range(12))
FP16: dict[str, Any] = dict(
    precision="16.16", partials="half", stochastic_rounding=True, optimizer_state="half"
)
PIPELINED = Config(
    **FP16,
    ipus_per_replica=4,
    gradient_accumulation=16,
    splits=("bert.encoder.layer.3", "bert.encoder.layer.6", "bert.encoder.layer.9"),
)


def trainer_call(block: str) -> dict[str | None, ast.expr]:
    call = next(
        n
        for n in ast.walk(ast.parse(block))
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "IPUTrainingArguments"
    )
    return {k.arg: k.value for k in call.keywords}


# --- failure 1: precision and loss scale said with fields IPUTrainingArguments has -------------


def test_the_trainer_block_uses_real_fields_fp32_and_loss_scaling() -> None:
    fp16 = trainer_call(render_trainer(BERT_MLM, PIPELINED.replace(loss_scaling=1024.0)))
    assert set(fp16) <= TRAINING_ARGUMENT_FIELDS and "fp16" not in fp16
    assert (
        ast.literal_eval(fp16["fp32"]) is False
        and ast.literal_eval(fp16["loss_scaling"]) == 1024.0
    )
    fp32 = Config(ipus_per_replica=4, gradient_accumulation=16, splits=PIPELINED.splits)
    block = render_trainer(BERT_MLM, fp32)
    assert (
        ast.literal_eval(trainer_call(block)["fp32"]) is True
    )  # else IPUTrainer halves the model
    assert "loss_scaling" not in trainer_call(block)
    auto = trainer_call(render_trainer(BERT_MLM, PIPELINED.replace(loss_scaling="auto")))
    assert ast.literal_eval(auto["auto_loss_scaling"]) is True


# --- failure 2: recomputation survives the export, or the export refuses -----------------------


def test_every_layer_checkpoints_export_as_every_layer_without_stage_ends_are_refused() -> None:
    """parallelize() checkpoints a stage's last layer too (issue 46): a trial without those three
    checkpoints is not what IPUTrainer trains."""
    profile = profile_for(BERT_MLM)
    config = PIPELINED.replace(checkpoints=LAYERS)
    assert config.checkpoints == optimum_checkpoints(profile)  # PipelinedBertForMaskedLM: all 12
    assert ipu_config(BERT_MLM, config, profile)["recompute_checkpoint_every_layer"] is True
    stage_ends = {"bert.encoder.layer.2", "bert.encoder.layer.5", "bert.encoder.layer.8"}
    fewer = PIPELINED.replace(checkpoints=tuple(p for p in LAYERS if p not in stage_ends))
    with pytest.raises(
        NotAnIPUConfig,
        match=r"checkpoints on 9 of the 12 layers parallelize\(\) checkpoints "
        r"\(not on bert.encoder.layer.2, bert.encoder.layer.5, bert.encoder.layer.8\)",
    ):
        ipu_config(BERT_MLM, fewer, profile)


def test_recomputation_ipu_config_cannot_say_is_refused_with_the_reason() -> None:
    profile = profile_for(BERT_MLM)
    single = Config(**FP16, recompute="standard")
    with pytest.raises(NotAnIPUConfig, match="recompute standard"):
        ipu_config(BERT_MLM, single, profile)
    some = PIPELINED.replace(checkpoints=LAYERS[:2])
    with pytest.raises(NotAnIPUConfig, match="2 of the 12 layers"):
        ipu_config(BERT_MLM, some, profile)
    embeddings = PIPELINED.replace(checkpoints=("bert.embeddings", *optimum_checkpoints(profile)))
    with pytest.raises(NotAnIPUConfig, match=r"checkpoints on bert.embeddings \(not a layer\)"):
        ipu_config(BERT_MLM, embeddings, profile)


# --- failure 3: serialisation factors optimum can run ------------------------------------------


def test_optimum_target_runs_only_factors_its_serialized_linear_can() -> None:
    def optimum(p: Problem) -> Problem:
        return Problem(**{**p.to_dict(), "trainer": "optimum"})

    assert serialization_factors(optimum(BERT_MLM)) == (1, 2)  # 30,522 words, not padded
    assert serialization_factors(
        optimum(Problem("hf:roberta-base", 4, task="masked-lm", seq_len=32))
    ) == (1,)
    assert serialization_factors(optimum(Problem("hf:gpt2", 1, task="causal-lm", seq_len=32))) == (
        1,
        2,
        4,
        8,
    )
    assert serialization_factors(BERT_MLM) == (1, 2, 4, 8)  # the snippet pads
    found = violations(optimum(BERT_MLM), PIPELINED.replace(embedding_serialization=4))
    assert found and "embedding_serialization 4" in found[0]
    assert not violations(BERT_MLM, PIPELINED.replace(embedding_serialization=4))


# --- failure 4: a sharded trial is not an IPUConfig ----------------------------------------------


def test_sharded_config_is_refused_as_an_ipu_config() -> None:
    sharded = PIPELINED.replace(execution="sharded", gradient_accumulation=3)
    with pytest.raises(NotAnIPUConfig, match="sharded execution"):
        ipu_config(BERT_MLM, sharded, profile_for(BERT_MLM))


@pytest.mark.slow
def test_export_of_a_sharded_trial_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    config = in_tmp / "sharded.toml"
    config.write_text(
        '[config]\nprecision = "16.16"\noptimizer_state = "half"\nstochastic_rounding = true\n'
        'ipus_per_replica = 4\nexecution = "sharded"\n'
        'splits = ["bert.encoder.layer.3", "bert.encoder.layer.6", "bert.encoder.layer.9"]\n'
    )
    # the study in this process (its trace is shared); the export as a user runs it: one line on
    # stderr
    run_cli_stdout(
        capsys,
        "hf:bert-base-uncased",
        "--task",
        "masked-lm",
        "--seq-len",
        "32",
        "--batch-size",
        "4",
        "--ipus",
        "4",
        "--trials",
        "1",
        "--study",
        "sharded",
        "--baseline",
        str(config),
    )
    proc = cli(
        "export",
        "--study",
        "sharded",
        "--trial",
        "0",
        "--format",
        "ipu-config",
        cwd=in_tmp,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr.count("\n") == 1
        and "sharded execution" in proc.stderr
        and "--trainer optimum" in proc.stderr
    )


# --- failure 5: a tied head on another stage than its weight -------------------------------------


@pytest.mark.parametrize("split", ["cls.predictions.decoder", "cls.predictions.transform"])
def test_a_split_that_takes_the_tied_head_off_the_embedding_ipu_breaks_a_rule(split: str) -> None:
    config = PIPELINED.replace(splits=("bert.encoder.layer.4", "bert.encoder.layer.8", split))
    found = violations(BERT_MLM, config, profile_for(BERT_MLM).module_order)
    assert any("tied to the embedding's weight" in m for m in found)
    assert not violations(BERT_MLM, PIPELINED, profile_for(BERT_MLM).module_order)


# --- failure 6: IPUTrainer's PopART options are compiled and estimated --------------------------


@pytest.mark.slow
def test_the_optimum_snippet_sets_iputrainers_popart_options_and_poptorch_sees_them() -> None:
    problem = Problem(**{**BERT_MLM.to_dict(), "trainer": "optimum"})
    snippet = render_snippet(problem, PIPELINED)
    assert "_Popart" not in render_snippet(BERT_MLM, PIPELINED)  # the PopTorch target is unchanged
    with fake_sdk() as poptorch:
        ns: dict[str, Any] = {}
        exec(compile(snippet, "best_options.py", "exec"), ns)
        opts = ns["make_options"]()
        seen = opts._Popart.options
        poptorch.trainingModel(
            ns["TrainingModel"](build_hf_model(problem.model, problem.task, 2, device="cpu")), opts
        )  # the fake checks every option as the C++ side would
    assert {k: seen[k] for k in POPART_OPTIONS} == POPART_OPTIONS
    assert seen["patterns"] == PATTERNS and seen["engineOptions"] == ENGINE_OPTIONS


def test_the_estimate_assumes_ipu0_outside_the_overlapped_weight_update() -> None:
    problem = Problem(**{**BERT_MLM.to_dict(), "trainer": "optimum"})
    config = PIPELINED.replace(optimizer_offload=True)
    profile = profile_for(BERT_MLM)
    poptorch_target, optimum_target = (
        estimate(BERT_MLM, config, profile),
        estimate(problem, config, profile),
    )
    update = optimum_target.details["time_parts"]["weight_update"]
    assert update > poptorch_target.details["time_parts"]["weight_update"] > 0
    assert not_none(optimum_target.step_time_s) > not_none(poptorch_target.step_time_s)
    assert (
        optimum_target.required_bytes == poptorch_target.required_bytes
    )  # memory is not what changed


# --- failure 7: tune writes how to train it; snippets compile clean -----------------------------


@pytest.mark.slow
def test_tune_writes_the_trainer_block_beside_ipu_config_json(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    out = json.loads(
        run_cli_stdout(
            capsys,
            "hf:bert-base-uncased",
            "--task",
            "masked-lm",
            "--seq-len",
            "32",
            "--batch-size",
            "4",
            "--ipus",
            "4",
            "--trainer",
            "optimum",
            "--trials",
            "4",
            "--seed",
            "2",
            "--json",
        )
    )
    folder = in_tmp / "ipu-autotune-out" / out["study"]
    block = (folder / "train_with_optimum.py").read_text()
    assert (in_tmp / out["files"]["trainer"]) == folder / "train_with_optimum.py"
    best = Config.from_dict(out["best"]["config"])
    args = trainer_call(block)
    assert ast.literal_eval(args["fp32"]) is (not best.half_weights)
    assert (
        ast.literal_eval(args["gradient_accumulation_steps"])
        == json.loads((folder / "ipu_config.json").read_text())["gradient_accumulation_steps"]
    )
    assert ("FP16 weights" if best.half_weights else "FP32 weights") in block


def test_snippets_make_tensors_on_the_models_device_and_token_models_have_no_input_dtype() -> None:
    snippet = render_snippet(BERT_MLM, PIPELINED.replace(embedding_serialization=4))
    tree = ast.parse(snippet)
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("ones", "zeros"):
            assert "device" in {k.arg for k in call.keywords}, ast.unparse(call)
    assert "INPUT_DTYPE" not in snippet
    assert "INPUT_DTYPE = torch.half" in render_snippet(
        Problem("resnet18", 4), Config(precision="16.16")
    )


def test_optimum_trainer_is_for_hf_models_with_its_optimizers() -> None:
    with pytest.raises(UsageError, match="hf: models"):
        check_problem(Problem("resnet18", 4, trainer="optimum"))
    with pytest.raises(UsageError, match="AdamW or LAMB"):
        check_problem(Problem("hf:gpt2", 1, optimizer="sgd", trainer="optimum"))


def test_optimum_takes_only_the_family_and_task_pairs_it_registers_a_pipelined_class_for() -> None:
    """A family optimum pipelines for other heads is refused for one it does not (BertLMHeadModel
    is not registered); each table entry names the class transformers builds for that pair."""
    from ipu_autotune.models.hf_config import task_class
    from ipu_autotune.rules.optimum_target import PIPELINED

    assert all(task_class(family, task) == name for (family, task), (name, _) in PIPELINED.items())
    check_problem(
        Problem("hf:bert-base-uncased", 4, task="masked-lm", seq_len=32, trainer="optimum")
    )
    bert_clm = Problem("hf:bert-base-uncased", 4, task="causal-lm", seq_len=32, trainer="optimum")
    with pytest.raises(
        UsageError, match="pipelines no bert causal-lm model: no pipelined BertLMHeadModel"
    ):
        check_problem(bert_clm)
    with pytest.raises(
        NotAnIPUConfig, match="BertLMHeadModel.*train it with the PopTorch snippet"
    ):
        ipu_config(bert_clm, Config(), profile_for(bert_clm))


# --- must show 2: the IPUConfig and the snippet of the same trials, read back ------------------

STUDIES = [
    (
        "hf:bert-base-uncased",
        "masked-lm",
        "bert.encoder.layer.",
        "cls.predictions.transform",
        True,
    ),
    ("hf:gpt2", "causal-lm", "transformer.h.", "lm_head", True),
    ("hf:roberta-base", "sequence-classification", "roberta.encoder.layer.", "classifier", False),
]


@pytest.mark.slow
@pytest.mark.parametrize("model, task, prefix, head, tied", STUDIES)
def test_ipu_config_and_snippet_of_a_study_place_the_same_things(
    capsys: pytest.CaptureFixture[str],
    in_tmp: Any,
    model: Any,
    task: Any,
    prefix: Any,
    head: Any,
    tied: Any,
) -> None:
    # the study in this process: the reading below traces the model once more, from its cache
    out = json.loads(
        run_cli_stdout(
            capsys,
            model,
            "--task",
            task,
            "--seq-len",
            "32",
            "--batch-size",
            "2",
            "--ipus",
            "4",
            "--trainer",
            "optimum",
            "--trials",
            "12",
            "--seed",
            "3",
            "--no-numerics",
            "--json",
        )
    )
    folder = in_tmp / "ipu-autotune-out" / out["study"]
    problem = Problem(model, 2, task=task, seq_len=32, ipus=4, trainer="optimum")
    profile = profile_for(problem)
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    configs = [Config.from_dict(r["config"]) for r in records if r["state"] == "COMPLETE"]
    best = Config.from_dict(out["best"]["config"])
    written = json.loads((folder / "ipu_config.json").read_text())
    assert written == ipu_config(problem, best, profile)
    # the best, then the trials that checkpoint or serialise first: four compiles on the fake SDK
    others = sorted(
        (c for c in configs if c.pipelined and c != best),
        key=lambda c: (not c.checkpoints, c.embedding_serialization == 1),
    )
    cases = [best] + others[:3]
    layers = [
        u.path
        for u in profile.units
        if u.path.startswith(prefix) and u.path[len(prefix) :].isdigit()
    ]
    seen_every_layer = seen_serialized = False
    with fake_sdk() as poptorch:
        for config in cases:
            data = ipu_config(problem, config, profile)
            from_json = read_ipu_config(data, problem, layers, tied)
            net = build_hf_model(model, task, 2, device="cpu")
            from_snippet, opts = read_snippet(
                poptorch,
                render_snippet(problem, config),
                net,
                layers,
                head,
                token_batch(problem, config),
            )
            assert from_snippet == from_json, config
            if data["ipus_per_replica"] > 1:  # the reading has teeth: one layer moved is seen
                moved = [
                    data["layers_per_ipu"][0] + 1,
                    data["layers_per_ipu"][1] - 1,
                    *data["layers_per_ipu"][2:],
                ]
                assert (
                    read_ipu_config({**data, "layers_per_ipu": moved}, problem, layers, tied)
                    != from_snippet
                )
            assert opts.Training.gradient_accumulation == data["gradient_accumulation_steps"]
            seen_every_layer |= bool(from_json.checkpointed)
            seen_serialized |= from_json.serialization > 1
    assert seen_every_layer  # the comparison covered checkpoints, not only empty sets
    assert seen_serialized or not tied
