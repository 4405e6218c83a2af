"""Under --trainer optimum, recomputation is where optimum-graphcore's parallelize() puts it
(issue 46).

Must show 1: for each of the issue's six problems, a study of 30 estimate trials; for its best and
two other trials, the checkpoints the snippet registers (run on the fake SDK) are compared layer by
layer with the ones the pipelined class's parallelize() registers for the exported IPUConfig, as
the per-class table reads them (tests/optimum_reading.skipped_layers:
`index != config.<count> - 1`, profiles/optimum_placement.SKIPPED_INDEX), and the estimate's
recomputation segments with them.

Each checkpoint output is counted the way PopTorch counts it: the snippet's hook is run on what
the layer returns in the transformers optimum pins (4.29.2, read in its models/*/modeling_*.py,
training, no attention weights): GPT2Block `(hidden_states, (key, value))` with use_cache on by
default, every other class `(hidden_states,)`. `recomputation_checkpoint`
(optimum/graphcore/modeling_utils.py) checkpoints each element of that tuple and
poptorch.recomputationCheckpoint flattens the nested one, so GPT-2 checkpoints 3 tensors per
block (36 for 12), BERT-large QA and classification 23 of 24 layers, RoBERTa classification 11
of 12, DistilBERT QA 5 of 6, BERT-base MLM all 12 (the issue's traces of the real libraries).

Must show 3: the note IPUTrainer's always-on stochastic rounding gets for an FP32 trial.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest_fake_sdk import fake_sdk
from optimum_reading import skipped_layers
from testing import not_none

import ipu_autotune
from ipu_autotune.backends.estimate.layout import stages
from ipu_autotune.export.ipu_config import ipu_config
from ipu_autotune.export.python import render_snippet
from ipu_autotune.export.trainer import render_trainer, trainer_notes
from ipu_autotune.models.hf import build_hf_model, model_config
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.placement import checkpoint_unit, is_layer, optimum_checkpoints
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.optimum_target import unexpressible

#: (model, task, seq_len, micro-batch) -> checkpoint outputs parallelize() registers over the model
#: under recompute_checkpoint_every_layer (the issue's counts from the real libraries)
PROBLEMS = {
    ("hf:bert-base-uncased", "masked-lm", 128, 8): 12,
    ("hf:bert-large-uncased", "question-answering", 384, 2): 23,
    ("hf:bert-large-uncased", "sequence-classification", 128, 4): 23,
    ("hf:gpt2", "causal-lm", 1024, 1): 36,
    ("hf:roberta-base", "sequence-classification", 128, 8): 11,
    ("hf:distilbert-base-uncased", "question-answering", 384, 4): 5,
}


def layer_returns(model: str, hidden: torch.Tensor, heads: int) -> Any:
    """What one layer returns under IPUTrainer in transformers 4.29.2 (see the module's
    docstring)."""
    if model == "hf:gpt2":
        b, s, d = hidden.shape
        key = torch.empty(b, heads, s, d // heads, device="meta")
        return hidden, (key, torch.empty_like(key))
    return (hidden,)


@pytest.fixture(scope="module", params=list(PROBLEMS), ids=lambda p: f"{p[0][3:]}-{p[1]}")
def study(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    model, task, seq_len, batch = request.param
    folder = tmp_path_factory.mktemp("study")
    result = ipu_autotune.tune(
        model,
        task=task,
        seq_len=seq_len,
        batch_size=batch,
        ipus=4,
        trainer="optimum",
        trials=30,
        seed=3,
        no_numerics=True,
        backend="estimate",
        storage=f"sqlite:///{folder}/s.db",
        out=str(folder / "out"),
    )
    return (
        request.param,
        Problem(model, batch, task=task, seq_len=seq_len, ipus=4, trainer="optimum"),
        result,
    )


def cases(result: Any) -> list[Config]:
    """The best trial and two others, those that checkpoint first."""
    best = result.best.config
    others = sorted(
        {r.config for r in result.records if r.config != best},
        key=lambda c: (not c.checkpoints, str(c)),
    )
    return [best, *others[:2]]


def snippet_checkpoints(
    poptorch: Any, problem: Problem, config: Config, returns: Any
) -> dict[str, list[torch.Tensor]]:
    """Module path -> the tensors PopTorch's recomputationCheckpoint takes when the snippet's hook
    sees what that layer returns: the snippet's annotate() run on the model under the fake SDK,
    its hooks found as the fake tracer finds them."""
    from poptorch import ops

    ns: dict[str, Any] = {}
    exec(compile(render_snippet(problem, config), "best_options.py", "exec"), ns)
    # padding a vocabulary for serialisation initialises the new rows from the others' statistics
    device = "cpu" if config.embedding_serialization > 1 else "meta"
    training_model = ns["TrainingModel"](
        build_hf_model(problem.model, problem.task, 2, device=device)
    )
    taken: list[torch.Tensor] = []
    checkpoint = poptorch.recomputationCheckpoint

    def counting(*tensors: Any) -> Any:
        flat = [t for x in tensors for t in (x if isinstance(x, (tuple, list)) else (x,))]
        taken.extend(flat)
        return checkpoint(*tensors)

    out = {}
    poptorch.recomputationCheckpoint = counting
    try:
        for path in ops.checkpointed_modules(training_model):
            module = training_model.get_submodule(path)
            taken.clear()
            for hook in module._forward_hooks.values():
                hook(module, (), returns)
            out[path.removeprefix("model.")] = list(taken)
    finally:
        poptorch.recomputationCheckpoint = checkpoint
    return out


@pytest.mark.slow
def test_snippet_and_estimate_checkpoint_what_parallelize_registers(study: Any) -> None:
    (model, task, seq_len, batch), problem, result = study
    profile = profile_for(problem)
    layers = [u.path for u in profile.units if is_layer(u.path)]
    hf = model_config(model)
    heads = hf.num_attention_heads
    hidden = torch.empty(batch, seq_len, hf.hidden_size, device="meta")  # FP32, as the trace
    returns = layer_returns(model, hidden, heads)
    # the search proposes no recomputation an IPUConfig cannot say
    assert all(not unexpressible(problem, r.config) for r in result.records)
    assert all(r.config.checkpoints in ((), optimum_checkpoints(profile)) for r in result.records)
    checked = 0
    with fake_sdk() as poptorch:
        for config in cases(result):
            data = ipu_config(problem, config, profile)
            theirs = set()  # layer indices parallelize() hooks with recomputation_checkpoint
            if data["recompute_checkpoint_every_layer"]:
                theirs = set(range(len(layers))) - skipped_layers(problem, layers)
            ours = snippet_checkpoints(poptorch, problem, config, returns)
            assert set(ours) <= set(layers), config  # layers only
            assert [p in ours for p in layers] == [i in theirs for i in range(len(layers))], config
            outputs = sum(len(t) for t in ours.values())
            assert outputs == (PROBLEMS[model, task, seq_len, batch] if theirs else 0), config
            # the estimate: its segments end where those checkpoints are, and it keeps what they
            # keep
            ends = {checkpoint_unit(profile, p) for p in config.checkpoints}
            assert ends == {profile.unit_index(layers[i]) for i in theirs}, config
            for stage in stages(profile, config):
                kept = sum(
                    t.numel() * 4
                    for p, ts in ours.items()
                    if stage.first <= not_none(profile.unit_index(p)) < stage.last
                    for t in ts
                )
                assert stage.checkpoint_bytes == kept, (config, stage.index)
            checked += bool(theirs)
    assert checked  # at least one trial checkpoints: the comparison has teeth


def test_gpt2_under_optimum_keeps_each_blocks_key_and_value_too() -> None:
    """The estimate of the same checkpointed config keeps 3 tensors per block under --trainer
    optimum and 1 (the snippet's hook on the PopTorch target checkpoints the hidden state only)."""
    poptorch_target = Problem("hf:gpt2", 1, task="causal-lm", seq_len=128, ipus=4)
    optimum = Problem(**{**poptorch_target.to_dict(), "trainer": "optimum"})
    profile = profile_for(optimum)
    splits = ("transformer.h.3", "transformer.h.6", "transformer.h.9")
    config = Config(
        precision="16.16",
        partials="half",
        stochastic_rounding=True,
        optimizer_state="half",
        ipus_per_replica=4,
        gradient_accumulation=16,
        splits=splits,
        checkpoints=optimum_checkpoints(profile),
    )
    assert len(config.checkpoints) == 12 and not unexpressible(optimum, config)
    ours = [s.checkpoint_bytes for s in stages(profile, config)]
    plain = [s.checkpoint_bytes for s in stages(profile_for(poptorch_target), config)]
    assert ours[:3] == [3 * b for b in plain[:3]] and all(b > 0 for b in plain[:3])
    assert (
        "tuple(y if y is None else poptorch.recomputationCheckpoint(y) for y in output)"
        in render_snippet(optimum, config)
    )
    assert "(poptorch.recomputationCheckpoint(output[0]), *output[1:])" in render_snippet(
        poptorch_target, config
    )


# --- must show 3: what IPUTrainer sets otherwise than the snippet, noted -------------------------

BERT = Problem("hf:bert-base-uncased", 4, task="masked-lm", seq_len=32, ipus=4, trainer="optimum")
SPLITS = ("bert.encoder.layer.3", "bert.encoder.layer.6", "bert.encoder.layer.9")


def test_an_fp32_trial_notes_that_iputrainer_turns_stochastic_rounding_on() -> None:
    fp32 = Config(ipus_per_replica=4, gradient_accumulation=16, splits=SPLITS)
    assert not fp32.stochastic_rounding and not unexpressible(BERT, fp32)
    with fake_sdk():  # the snippet's options leave it off
        ns: dict[str, Any] = {}
        exec(compile(render_snippet(BERT, fp32), "best_options.py", "exec"), ns)
        assert not ns["make_options"]()._Popart.options.get("enableStochasticRounding", False)
    note = next(n for n in trainer_notes(fp32) if n.startswith("Stochastic rounding"))
    assert "IPUTrainer always enables it" in note and "IPUConfig._to_options" in note
    assert "# Stochastic rounding: on." in render_trainer(
        BERT, fp32
    )  # the IPUTrainer block says it too
    fp16 = fp32.replace(
        precision="16.16", partials="half", stochastic_rounding=True, optimizer_state="half"
    )
    assert not unexpressible(BERT, fp16)
    assert not any(
        n.startswith("Stochastic rounding") for n in trainer_notes(fp16)
    )  # the snippet has it on


def test_a_replica_on_a_count_of_ipus_not_a_power_of_two_notes_autoroundnumipus() -> None:
    three = Config(ipus_per_replica=3, gradient_accumulation=16, splits=SPLITS[:2])
    assert any(
        n.startswith("IPUs: IPUTrainer reserves 4 for this trial's 3")
        for n in trainer_notes(three)
    )
    assert not any(
        n.startswith("IPUs:")
        for n in trainer_notes(three.replace(replicas=2, ipus_per_replica=2, splits=SPLITS[:1]))
    )
