"""Issue 23, part B: offload with sharding as PopART places it, no split the estimator cannot
place, suggestions that are whole re-estimated configurations, and `estimate` answering a
configuration that breaks a recipe rule."""

from __future__ import annotations

import json
import re
from typing import Any

import optuna
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from testing import not_none

from ipu_autotune.backends.base import Measurement, format_bytes
from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.cli import main
from ipu_autotune.guide.suggestions import suggestions
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import EXIT_BREAKS_RECIPE, violations
from ipu_autotune.search.space import SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# GPT-2 (124M): the word embedding, 50,257 x 768, is the largest tensor, on IPU0 with its tied
# head.
VOCAB, HIDDEN = 50257, 768
ADAMW_FLOAT_STATE = 4 + 4  # first and second moment, FP32 (optimizer_state "float")


def gpt2(replicas: int) -> Problem:
    return Problem(
        "hf:gpt2", 1, task="causal-lm", seq_len=16, optimizer="adamw", ipus=4 * replicas
    )


def gpt2_config(replicas: int, offload: bool, sharding: bool) -> Config:
    return Config(
        precision="16.16",
        ipus_per_replica=4,
        replicas=replicas,
        gradient_accumulation=16,
        splits=("transformer.h.3", "transformer.h.6", "transformer.h.9"),
        optimizer_offload=offload,
        replicated_tensor_sharding=sharding,
    )


def optimizer_bytes(replicas: int, offload: bool, sharding: bool) -> list[int]:
    p, c = gpt2(replicas), gpt2_config(replicas, offload, sharding)
    assert violations(p, c, profile_for(p).module_order) == []
    return [bd["optimizer"] for bd in EstimateBackend().measure(p, c).breakdown]


# --- must show 2: offload with replicated tensor sharding ---------------------------------------


def test_sharding_divides_the_offloaded_state_on_chip_by_the_replicas() -> None:
    """PopART wires the optimizer op to the loaded, sharded tensor (popart
    willow/src/transforms/streamingmemoryopinserter.cpp, StreamingMemoryOpInserter::applyTensor),
    each replica loading (n - 1) / R + 1 elements of it (insertRemoteLoadOp): with the state
    offloaded, what is on chip for the update is the largest tensor's shard, not all of it."""
    largest = VOCAB * HIDDEN
    assert optimizer_bytes(2, offload=True, sharding=False)[0] == largest * ADAMW_FLOAT_STATE
    for replicas in (2, 4):
        shard = (largest - 1) // replicas + 1
        assert (
            optimizer_bytes(replicas, offload=True, sharding=True)[0] == shard * ADAMW_FLOAT_STATE
        )


def test_sharding_on_chip_divides_each_tensor_but_those_under_8192_elements() -> None:
    """On chip, each replica keeps its shard of every tensor of at least
    minElementsForReplicatedTensorSharding (8192) elements; biases and norms stay whole
    (StreamingMemoryOpInserter::determineTensorLocation, tooSmallForReplicatedTensorSharding)."""
    # IPU1 holds GPT-2 blocks h.3-h.5: four matrices and 9,984 elements of biases and norms each.
    big = 3 * (HIDDEN * 3 * HIDDEN + HIDDEN * HIDDEN + 2 * HIDDEN * 4 * HIDDEN)
    small = 3 * (4 * HIDDEN + 3 * HIDDEN + HIDDEN + 4 * HIDDEN + HIDDEN)
    whole = optimizer_bytes(2, offload=False, sharding=False)[1]
    sharded = optimizer_bytes(2, offload=False, sharding=True)[1]
    assert whole == (big + small) * ADAMW_FLOAT_STATE
    assert abs(sharded - (big / 2 + small) * ADAMW_FLOAT_STATE) <= 1


def test_switching_sharding_changes_the_offload_streaming_time() -> None:
    p = gpt2(2)
    on = EstimateBackend().measure(p, gpt2_config(2, offload=True, sharding=True))
    off = EstimateBackend().measure(p, gpt2_config(2, offload=True, sharding=False))
    assert (
        on.details["time_parts"]["weight_update"]
        < 0.6 * off.details["time_parts"]["weight_update"]
    )


def test_the_advice_never_says_turning_offload_off_saves_memory_on_gpt2() -> None:
    p = gpt2(2)
    config = gpt2_config(2, offload=True, sharding=True)
    tips = suggestions(p, config, limit=50)
    assert tips  # the advice is there, just not this piece of it
    assert not [t for t in tips if not t.config.optimizer_offload]


def _problem() -> Problem:
    return Problem("resnet18", 4, input_shape=(3, 32, 32), num_classes=10, ipus=4)


def _draw(seed: int, p: Problem) -> Config:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return SearchSpace.load(p).sample(study.ask(), p, profile_for(p))


@pytest.mark.slow
@given(st.integers(0, 10**6))
@SETTINGS
def test_turning_offload_off_never_lowers_on_chip_memory(seed: Any) -> None:
    p = _problem()
    c = _draw(seed, p).replace(optimizer_offload=True)
    for sharding in (False, True) if c.replicas > 1 else (False,):
        on = c.replace(replicated_tensor_sharding=sharding)
        off = on.replace(optimizer_offload=False)
        backend = EstimateBackend()
        for x, y in zip(
            backend.measure(p, on).required_bytes,
            backend.measure(p, off).required_bytes,
            strict=True,
        ):
            assert x <= y
        assert not [t for t in suggestions(p, on) if not t.config.optimizer_offload]


# --- must show 3: splits the estimator places (inside a layer too: test_in_block_placement.py);
# suggestions are re-estimates


def one_line_exit_2(code: int, err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "internal error" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_container_split_begins_its_first_layer() -> None:
    """Graphcore's pipelined ResNet-50 splits at `layer2`, `layer3`, `layer4` (calibration M5):
    each stage begins at the container's first block, not at the block before it."""
    p = Problem("resnet50", 16, input_shape=(3, 224, 224), ipus=4, max_global_batch=4096)
    c = Config(
        precision="16.16",
        ipus_per_replica=4,
        gradient_accumulation=16,
        splits=("layer2", "layer3", "layer4"),
    )
    assert violations(p, c, profile_for(p).module_order) == []
    m = EstimateBackend().measure(p, c)
    units = [u.path for u in profile_for(p).units]
    assert [units[first] for first, _ in m.details["stage_units"][1:]] == [
        "layer2.0",
        "layer3.0",
        "layer4.0",
    ]
    assert suggestions(p, c)  # the advice places the same stages (was: KeyError 'layer2')


def _tiles(m: Measurement) -> int:
    return m.capacity_bytes[0] // m.tile_capacity_bytes


# resnet18 at 32x32 always fits (suggestions that move the busiest IPU); ResNet-50 at 224x224
# mostly does not (suggestions that fit, and ones that leave it out of memory).
PROBLEMS = (_problem(), Problem("resnet50", 16, input_shape=(3, 224, 224), ipus=4))


@given(st.integers(0, 10**6), st.sampled_from(PROBLEMS), st.sampled_from([0.0, 0.05]))
@SETTINGS
def test_every_suggestion_claims_what_its_whole_configuration_re_estimates_to(
    seed: Any, p: Any, headroom: Any
) -> None:
    config = _draw(seed, p)
    backend = EstimateBackend(headroom=headroom)
    base = backend.measure(p, config)
    for tip in suggestions(p, config, measure=backend.measure):
        again = EstimateBackend(headroom=headroom).measure(p, tip.config)
        assert again.to_dict() == tip.measurement.to_dict()
        saving = max(base.max_tile_bytes) * _tiles(base) - max(again.max_tile_bytes) * _tiles(
            again
        )
        assert tip.saving == saving > 0
        assert f"saves {format_bytes(saving)} on the busiest IPU" in tip.text
        assert (", fits" in tip.text) == (again.feasible and not base.feasible)
        assert ("still " + again.verdict() in tip.text) == (not again.feasible)
        ratio = re.search(r", ([0-9.]+)x throughput", tip.text)
        speedup = not_none(again.throughput) / not_none(base.throughput)
        if ratio:
            assert float(ratio.group(1)) == round(speedup, 2)
        else:
            assert abs(speedup - 1) <= 0.005
        # The text names every field the suggestion changes: applying it gives exactly tip.config.
        changed = {k for k, v in tip.config.to_dict().items() if config.to_dict()[k] != v}
        named = set(re.findall(r"(?:^|, )([a-z_]+) ", tip.text.split(": saves")[0]))
        assert named == changed, tip.text


# --- must show 4: estimate answers for a configuration that breaks a recipe rule -----------------


def test_estimate_above_the_global_batch_ceiling_prints_the_verdict_and_the_rule(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    args = [
        "estimate",
        "resnet18",
        "--batch-size",
        "16",
        "--set",
        "ipus_per_replica=1",
        "--set",
        "splits=[]",
        "--set",
        "replicas=2",
        "--set",
        "gradient_accumulation=128",
    ]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == EXIT_BREAKS_RECIPE == 4 and err == ""
    assert re.search(r"^verdict: (fits at \d+% of a tile|OOM by .* on IPU0)", out, re.M), out
    assert "throughput:" in out
    flat = " ".join(out.split())
    assert (
        "breaks a recipe rule: global batch 4096 (micro-batch 16 x accumulation 128 x replicas 2) "
        "is above the ceiling 2048; lower gradient_accumulation or raise --max-global-batch"
    ) in flat

    code = main(args + ["--json"])
    out, _ = capsys.readouterr()
    result = json.loads(out)
    assert code == 4 and "feasible" in result and result["throughput"] > 0
    assert (
        len(result["rules_broken"]) == 1 and "above the ceiling 2048" in result["rules_broken"][0]
    )


def test_estimate_within_the_recipe_exits_0_and_a_broken_hardware_rule_still_exits_2(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    base = [
        "estimate",
        "resnet18",
        "--batch-size",
        "16",
        "--set",
        "ipus_per_replica=1",
        "--set",
        "splits=[]",
    ]
    assert main(base + ["--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["rules_broken"] == []
    code = main(base + ["--ipus", "3", "--set", "replicas=3"])
    one_line_exit_2(code, capsys.readouterr()[1], "power of two")


def test_the_search_keeps_the_recipe_rules_hard(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    (in_tmp / "base.toml").write_text(
        "[config]\nipus_per_replica = 1\nsplits = []\nreplicas = 2\ngradient_accumulation = 128\n"
    )
    code = main(
        [
            "resnet18",
            "--batch-size",
            "16",
            "--baseline",
            "base.toml",
            "--storage",
            f"sqlite:///{in_tmp / 'study.db'}",
        ]
    )
    one_line_exit_2(
        code, capsys.readouterr()[1], "base.toml breaks a rule", "above the ceiling 2048"
    )
    assert not (in_tmp / "study.db").exists()


def test_exit_code_4_is_documented() -> None:
    from pathlib import Path

    import ipu_autotune.cli as cli

    assert "4 `estimate` answered" in cli.__doc__
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "| 4 | `estimate` answered" in readme
