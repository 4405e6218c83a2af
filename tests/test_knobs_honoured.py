"""What the tool recommends is what PopTorch does (issue 10, must-show 1 and 3).

Config -> exported snippet -> executed against the fake SDK -> the Config rebuilt from what
PopTorch saw (options, optimizer, annotations, input dtype) equals the original, knob for
knob, over `dataclasses.fields(Config)`: a knob added to Config that the snippet does not
export, or that the fake cannot see, fails here.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest_fake_sdk import SMALL_CNN, fake_sdk
from testing import not_none

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.backends.poptorch import child
from ipu_autotune.export.python import render_snippet
from ipu_autotune.guide.warmstart import naive_baseline, proposals
from ipu_autotune.models.zoo import build_model
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace, builtin_space_path
from ipu_autotune.study.records import _RandomAnswers

SHIPPED = ("default", "cnn", "transformer")
OPTIMIZERS = ("adamw", "sgd", "sgd_combined", "lamb")


@pytest.fixture(scope="module")
def poptorch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with fake_sdk() as module:
        yield module


def problem(optimizer: str = "adamw", ipus: int = 4) -> Problem:
    return Problem(
        model=SMALL_CNN,
        batch_size=4,
        input_shape=(3, 16, 16),
        num_classes=10,
        optimizer=optimizer,
        ipus=ipus,
    )


def seen_by_poptorch(poptorch: Any, p: Problem, c: Config, tmp: Any) -> Config:
    ns: dict[str, Any] = {}
    exec(render_snippet(p, c), ns)
    model = ns["TrainingModel"](build_model(p.model, p.num_classes, device="cpu", task=p.task))
    opts = ns["make_options"]()
    child.add_tuner_options(
        opts,
        poptorch,
        {"report_dir": str(tmp), "cache_dir": str(tmp / "cache")},
        p,
        hardware=False,
    )
    training = poptorch.trainingModel(model, opts, ns["make_optimizer"](model))
    try:
        training.compile(*child.host_batch(p, c, ns.get("INPUT_DTYPE", torch.float)))
    except poptorch.Error as exc:  # out of memory still says what PopTorch understood
        if "Out of memory" not in str(exc):
            raise
    seen: Config = training.fake_record["config"]  # the fake PopTorch's record of the compile
    return seen.replace(**loader_seen(poptorch, ns))


def loader_seen(poptorch: Any, ns: dict[str, Any]) -> dict[str, Any]:
    """The host knobs, as the snippet's poptorch.DataLoader received them."""
    dataset = torch.utils.data.TensorDataset(torch.zeros(1, 1))
    loader = ns["make_loader"](ns["make_options"](), dataset)
    assert isinstance(loader, poptorch.DataLoader)
    mode = {poptorch.DataLoaderMode.Sync: "sync", poptorch.DataLoaderMode.Async: "async"}[
        loader._mode
    ]
    return {"loader_mode": mode, "loader_workers": loader.num_workers}


def assert_same_knobs(original: Config, seen: Config, where: str) -> None:
    differ = [
        f"{f.name}: {getattr(original, f.name)!r} became {getattr(seen, f.name)!r}"
        for f in dataclasses.fields(Config)
        if getattr(original, f.name) != getattr(seen, f.name)
    ]
    assert not differ, f"{where}: " + "; ".join(differ)


def drawn_configs() -> Any:
    """Configs from every shipped space (random answers) and from the warm starts."""
    rng = random.Random(10)
    out = []
    for name in SHIPPED:
        for optimizer in OPTIMIZERS:
            p = problem(optimizer)
            profile = profile_for(p)
            space = SearchSpace.load(p, str(builtin_space_path(name)))
            for _ in range(6):
                out.append(
                    (f"{name}/{optimizer}", p, space.sample(_RandomAnswers(rng), p, profile))
                )
    for optimizer in ("adamw", "sgd_combined"):
        p = problem(optimizer)
        profile = profile_for(p)
        space = SearchSpace.load(p)
        for proposal in proposals(p, profile, space, naive_baseline(p, profile))[1:]:
            out.append((f"warm start {proposal.origin}/{optimizer}", p, proposal.config))
    return out


@pytest.mark.slow
def test_every_drawn_config_is_what_poptorch_sees(poptorch: Any, tmp_path: Path) -> None:
    cases = drawn_configs()
    assert len(cases) > 70
    # splits inside a large block (profiles/refine.split_grid) go through BeginBlock too (issue 42)
    assert any(s.endswith(".conv2") for _, _, c in cases for s in c.splits)
    for i, (where, p, c) in enumerate(cases):
        assert_same_knobs(c, seen_by_poptorch(poptorch, p, c, tmp_path / str(i)), where)


def test_a_knob_poptorch_does_not_see_fails_the_comparison(poptorch: Any, tmp_path: Path) -> None:
    """The check has teeth: partials with FP32 compute are not exported, so they are not seen."""
    p = problem()
    c = Config(partials="half")
    with pytest.raises(AssertionError, match="partials"):
        assert_same_knobs(c, seen_by_poptorch(poptorch, p, c, tmp_path), "fp32 with half partials")


# --- must-show 3: no estimator credit for what the exported code does not change -------------


def _profiled(p: Problem) -> Any:
    return p, profile_for(p)


def test_pipelined_standard_norm_only_and_all_are_one_estimate() -> None:
    p, profile = _profiled(problem(ipus=2))
    base = Config(ipus_per_replica=2, splits=("block2",), gradient_accumulation=4)
    results = {
        mode: estimate(p, base.replace(recompute=mode), profile)
        for mode in ("standard", "norm_only", "all")
    }
    assert len({(tuple(m.required_bytes), m.throughput) for m in results.values()}) == 1
    unpipelined = {
        mode: estimate(p, Config(recompute=mode), profile)
        for mode in ("standard", "norm_only", "all")
    }
    assert (
        len({(tuple(m.required_bytes), m.throughput) for m in unpipelined.values()}) == 3
    )  # they differ there


def test_the_sampler_does_not_spend_trials_on_modes_that_compile_alike() -> None:
    p, profile = _profiled(problem(ipus=2))
    space = SearchSpace.load(p)
    rng = random.Random(0)
    pipelined = set()
    for _ in range(300):
        c = space.sample(_RandomAnswers(rng), p, profile)
        if c.pipelined:
            pipelined.add(c.effective_recompute)
            assert c.recompute in (
                "default",
                "none",
                "standard",
            )  # "all" collapsed into "standard"
    assert pipelined == {"pipeline", "none", "all"}


def test_io_tiles_earn_no_overlap_credit() -> None:
    """The snippet reserves I/O tiles but does not overlap I/O: fewer compute tiles, never
    faster."""
    p, profile = _profiled(problem(ipus=1))
    for c in (Config(execution="sharded"), Config(execution="sharded", device_iterations=8)):
        without = estimate(p, c, profile)
        with_tiles = estimate(p, c.replace(io_tiles=64), profile)
        assert not_none(with_tiles.throughput) <= not_none(without.throughput)
        assert with_tiles.max_tile_bytes[0] >= without.max_tile_bytes[0]


def test_offload_and_rts_change_nothing_with_sgd_combined() -> None:
    p, profile = _profiled(problem("sgd_combined", ipus=4))
    base = Config(replicas=4)
    plain = estimate(p, base, profile)
    for knobs in (
        {"optimizer_offload": True},
        {"replicated_tensor_sharding": True},
        {"optimizer_offload": True, "replicated_tensor_sharding": True},
    ):
        m = estimate(p, base.replace(**knobs), profile)
        assert (m.required_bytes, m.throughput, m.breakdown) == (
            plain.required_bytes,
            plain.throughput,
            plain.breakdown,
        )
    # ...while they do change the estimate with an optimizer that keeps state
    q = problem("adamw", ipus=4)
    assert (
        estimate(q, base.replace(optimizer_offload=True), profile).required_bytes
        != estimate(q, base, profile).required_bytes
    )


def test_sgd_combined_never_samples_offload_or_rts() -> None:
    p, profile = _profiled(problem("sgd_combined", ipus=4))
    space = SearchSpace.load(p)
    rng = random.Random(1)
    for _ in range(200):
        c = space.sample(_RandomAnswers(rng), p, profile)
        assert not c.optimizer_offload and not c.replicated_tensor_sharding


# --- split and checkpoint candidates: never where a skip connection crosses -------------------


@pytest.mark.parametrize(
    "name",
    ["efficientnet_b0", "mobilenet_v3_small", "convnext_tiny", "regnet_y_400mf", "resnet18"],
)
def test_no_split_candidate_lies_inside_a_residual_block(name: str) -> None:
    from ipu_autotune.profiles.trace import _has_skip, trace_model

    model = build_model(name, 10)
    profile = trace_model(name, 2, (3, 32, 32), 10)
    assert len(profile.units) >= 5
    for unit in profile.units:
        parts = unit.path.split(".")
        for depth in range(1, len(parts)):
            ancestor = model.get_submodule(".".join(parts[:depth]))
            assert not _has_skip(ancestor), (
                f"{unit.path} is inside {'.'.join(parts[:depth])}, a residual block"
            )


# --- snippet comments come from the exported config ---------------------------------------------


def _advice(auto: bool, scale: float, partials: str, rounding: bool) -> Any:
    from types import SimpleNamespace as NS

    return NS(
        loss_scale=NS(auto=auto, scale=scale, reason="gradients underflow below 2^-24"),
        partials=NS(recommend=partials, reason="accumulations stay in range"),
        stochastic_rounding=NS(recommend=rounding, reason="small updates"),
    )


def test_snippet_comments_cannot_contradict_its_code() -> None:
    from ipu_autotune import export
    from ipu_autotune.export.notes import numerics_notes

    p = problem()
    advice = _advice(auto=True, scale=8192.0, partials="half", rounding=True)
    c = Config(precision="16.16", loss_scaling=128.0, partials="float", stochastic_rounding=True)
    text = export.render("python", p, c, notes=numerics_notes(advice, c))
    assert "loss_scaling=128.0" in text and "8192" not in text and "automatic" not in text
    assert (
        "partials float: set by the search space" in text
        and "stochastic rounding on: small updates" in text
    )
    fp32 = Config()
    text = export.render("python", p, fp32, notes=numerics_notes(advice, fp32))
    assert "does not apply" in text and "half" not in text.split("import torch")[0]
    followed = Config(
        precision="16.16", loss_scaling="auto", partials="half", stochastic_rounding=True
    )
    text = export.render("python", p, followed, notes=numerics_notes(advice, followed))
    assert "loss scaling automatic: gradients underflow" in text and "starting at 128" in text


@pytest.mark.slow
def test_masked_lm_configs_round_trip_with_embedding_serialization(
    poptorch: Any, tmp_path: Path
) -> None:
    """hf: masked LM drawn from transformer.toml, whose knobs include embedding_serialization,
    plus the first with every factor (4 and 8 pad BERT's 30,522 words): what the fake PopTorch
    rebuilds from the snippet's serializedMatMul calls equals the config, factor included."""
    p = Problem("hf:bert-base-uncased", 2, task="masked-lm", seq_len=32, ipus=4)
    profile = profile_for(p)
    space = SearchSpace.load(p, str(builtin_space_path("transformer")))
    rng = random.Random(12)
    cases = [space.sample(_RandomAnswers(rng), p, profile) for _ in range(3)]
    cases += [
        cases[0].replace(embedding_serialization=f)
        for f in (1, 2, 4, 8)
        if f != cases[0].embedding_serialization
    ]
    for i, c in enumerate(cases):
        assert_same_knobs(
            c, seen_by_poptorch(poptorch, p, c, tmp_path / str(i)), f"bert masked-lm {i}"
        )


def test_question_answering_round_trips_with_input_embedding_serialization(
    poptorch: Any, tmp_path: Path
) -> None:
    """hf: question answering (no vocabulary head) with its token embedding in look-ups, drawn
    from a space that lists the factors and set by hand: the fake PopTorch rebuilds the factor
    from the SerializedEmbedding the snippet put in the model, every other knob as before."""
    p = Problem("hf:bert-base-uncased", 2, task="question-answering", seq_len=32, ipus=4)
    profile = profile_for(p)
    space = SearchSpace.load(p).with_knob("input_embedding_serialization", [1, 2], "test")
    rng = random.Random(21)
    cases = [space.sample(_RandomAnswers(rng), p, profile) for _ in range(3)]
    cases += [
        cases[0].replace(input_embedding_serialization=f)
        for f in (1, 2)
        if f != cases[0].input_embedding_serialization
    ]
    assert {c.input_embedding_serialization for c in cases} == {1, 2}
    for i, c in enumerate(cases):
        assert_same_knobs(c, seen_by_poptorch(poptorch, p, c, tmp_path / str(i)), f"bert qa {i}")
