"""The fake PopTorch is strict where PopTorch is, and every call the tuner makes exists in it.

In-process (no subprocess): the fake is importable only inside the `poptorch` fixture.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest_fake_sdk import SMALL_CNN, fake_sdk
from testing import not_none

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.backends.estimate.constants import NOMINAL
from ipu_autotune.backends.poptorch import child
from ipu_autotune.backends.poptorch.profile import find_profile, read_profile
from ipu_autotune.export.python import render_snippet
from ipu_autotune.models.zoo import build_model
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for


@pytest.fixture(scope="module")
def poptorch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    global _REPORTS
    _REPORTS = tmp_path_factory.mktemp("fake-reports")
    with fake_sdk() as module:
        assert module.__fake__
        yield module


_REPORTS: Path | None = None  # the module's fixture sets it
_COUNT = itertools.count()


def new_report_dir() -> str:
    return str(not_none(_REPORTS) / f"report-{next(_COUNT)}")


def problem(batch: int = 8, optimizer: str = "adamw") -> Problem:
    return Problem(
        model=SMALL_CNN,
        batch_size=batch,
        input_shape=(3, 32, 32),
        num_classes=10,
        optimizer=optimizer,
        ipus=8,
    )


def compile_snippet(poptorch: Any, p: Problem, c: Config, snippet: str | None = None) -> Any:
    """What the trial child does, in-process: exec the snippet, add tuner options, compile.

    Returns (executor, error or None, report dir).
    """
    ns: dict[str, Any] = {}
    exec(snippet or render_snippet(p, c), ns)
    model = ns["TrainingModel"](build_model(p.model, p.num_classes, device="cpu"))
    opts = ns["make_options"]()
    report = new_report_dir()
    child.add_tuner_options(
        opts, poptorch, {"report_dir": report, "cache_dir": report + "/cache"}, p, hardware=False
    )
    optimizer = ns["make_optimizer"](model)
    x, labels = child.host_batch(p, c, ns.get("INPUT_DTYPE", torch.float))
    training = poptorch.trainingModel(model, opts, optimizer)
    try:
        training.compile(x, labels)
    except poptorch.Error as exc:
        return training, exc, report
    return training, None, report


# --- every knob of the exported snippet, against the fake ------------------------------------

SPREAD = {
    "defaults": (problem(), Config()),
    "fp16-lamb-sr-half-state": (
        problem(optimizer="lamb"),
        Config(
            precision="16.16",
            partials="half",
            stochastic_rounding=True,
            loss_scaling=1024.0,
            optimizer_state="half",
        ),
    ),
    "auto-loss-scaling-sgd": (
        problem(optimizer="sgd"),
        Config(precision="16.16", loss_scaling="auto"),
    ),
    "offload-rts-replicas": (
        problem(optimizer="adam"),
        Config(replicas=2, optimizer_offload=True, replicated_tensor_sharding=True),
    ),
    "io-tiles-sharded": (
        problem(optimizer="sgd_combined"),
        Config(
            ipus_per_replica=2,
            splits=("block2",),
            execution="sharded",
            io_tiles=64,
            available_memory_proportion=(0.3, 0.5),
        ),
    ),
    "recompute-standard-one-ipu": (problem(), Config(recompute="standard")),
    "recompute-norm-only": (problem(), Config(recompute="norm_only")),
    "recompute-all-checkpoint": (problem(), Config(recompute="all", checkpoints=("block1",))),
    "pipeline-4-ipus-8bit": (
        problem(optimizer="rmsprop"),
        Config(
            precision="16.16",
            eight_bit_io=True,
            ipus_per_replica=4,
            splits=("block1", "block2", "block3"),
            gradient_accumulation=7,
            device_iterations=4,
            available_memory_proportion=(0.3, 0.4, 0.5, 0.6),
            recompute="pipeline",
            checkpoints=("block2",),
        ),
    ),
    "pipeline-no-recompute": (
        problem(),
        Config(ipus_per_replica=2, splits=("block3",), gradient_accumulation=3, recompute="none"),
    ),
}


def expected(c: Config) -> Config:
    """What the fake can see of a config: partials only matter (and are exported) for FP16
    compute."""
    return c if c.half_compute else c.replace(partials="float")


@pytest.mark.parametrize("name", list(SPREAD))
def test_snippet_and_tuner_options_compile_against_the_fake(poptorch: Any, name: Any) -> None:
    p, c = SPREAD[name]
    training, error, report = compile_snippet(poptorch, p, c)
    assert error is None, f"{name}: {error}"
    seen = training.fake_record
    # The fake rebuilt the configuration from PopTorch's view alone: the snippet set every knob.
    assert seen["config"] == expected(c)
    assert (
        seen["problem"].batch_size,
        seen["problem"].input_shape,
        seen["problem"].num_classes,
        seen["problem"].optimizer,
    ) == (p.batch_size, p.input_shape, p.num_classes, p.optimizer)
    assert find_profile(report) is not None  # the tuner's engine options produced a profile
    assert training.isCompiled() and not training.isAttachedToDevice()  # offline target


def test_fp16_input_with_fp32_weights_is_upcast_by_poptorch(poptorch: Any) -> None:
    """16.32 exports half inputs and float weights; PopTorch 3.x upcasts mixed ops to fp32
    (supported_ops.rst), so the fake computes (and counts memory) in fp32. See the report."""
    p, c = problem(), Config(precision="16.32")
    training, error, _ = compile_snippet(poptorch, p, c)
    assert error is None
    assert training.fake_record["compute_dtype"] == torch.float32
    assert training.fake_record["config"].precision == "32.32"


def test_a_typo_or_a_float_in_the_snippet_is_rejected(poptorch: Any) -> None:
    p, c = problem(), Config(gradient_accumulation=8)
    good = render_snippet(p, c)
    assert "opts.Training.gradientAccumulation(8)" in good
    with pytest.raises(AttributeError, match="Invalid attribute gradientAcumulation"):
        compile_snippet(
            poptorch, p, c, good.replace("gradientAccumulation(8)", "gradientAcumulation(8)")
        )
    with pytest.raises(AssertionError, match="Unexpected type"):
        compile_snippet(
            poptorch, p, c, good.replace("gradientAccumulation(8)", "gradientAccumulation(8.0)")
        )


# --- Options: types, keys, freezing ------------------------------------------------------------


def test_option_values_are_type_checked_like_optionsdict_set(poptorch: Any) -> None:
    opts = poptorch.Options()
    with pytest.raises(AssertionError, match="Unexpected type"):
        opts.Training.gradientAccumulation(8.0)
    with pytest.raises(AssertionError, match="Unexpected type"):
        opts.deviceIterations(np.int64(4))  # numpy scalars too (pitfall 14)
    with pytest.raises(AttributeError):
        opts.Training.gradientAcumulation(8)
    with pytest.raises(AttributeError):
        opts.setHalfFloatCastingBehavior(1)  # does not exist in PopTorch 3.x
    with pytest.raises(AssertionError, match="Invalid key: 0"):
        opts.setAvailableMemoryProportion({"0": 0.5})
    for bad in (30, 33, 194):
        with pytest.raises(AssertionError, match="even number between 32 and 192"):
            opts.TensorLocations.numIOTiles(bad)
    with pytest.raises(AssertionError):
        opts.TensorLocations.setOptimizerLocation({"onChip": False})
    with pytest.raises(AssertionError):
        opts.connectionType(1)
    with pytest.raises(ValueError):
        opts.Precision.setPartialsType(torch.bfloat16)
    # the right calls chain and land where PopART reads them
    opts.Training.gradientAccumulation(8).setAutomaticLossScaling(True)
    opts.setAvailableMemoryProportion({"IPU0": 0.3, "IPU1": 0.5}).deviceIterations(4)
    assert opts.available_memory_proportion == {0: 0.3, 1: 0.5}
    assert opts._Popart.options["automaticLossScalingSettings.enabled"] is True


def test_options_freeze_on_training_model_and_clone_unfreezes(poptorch: Any) -> None:
    opts = poptorch.Options()
    model = build_model(SMALL_CNN, 10, device="cpu")
    poptorch.trainingModel(_with_loss(model), opts)
    changes: tuple[Callable[[], object], ...] = (
        lambda: opts.deviceIterations(2),
        lambda: opts.Training.gradientAccumulation(2),
        lambda: opts._Popart.set("autoRecomputation", 3),
        lambda: opts.Precision.enableStochasticRounding(True),
    )
    for change in changes:
        with pytest.raises(AttributeError, match="Can't modify frozen Options"):
            change()
    fresh = opts.clone()
    fresh.deviceIterations(2).Training.gradientAccumulation(3)
    assert "device_iterations=2" in repr(fresh) and "gradient_accumulation=3" in repr(fresh)
    with pytest.raises(AssertionError, match="output mode"):
        poptorch.Options().toDict()  # why the tuner logs repr(opts) (pitfall 13)


def test_popart_keys_and_engine_options_are_checked_at_compile(poptorch: Any) -> None:
    cases: list[tuple[Callable[[Any], object], str]] = [
        (
            lambda o: o._Popart.set("autoRecomputation", True),
            "Unknown bool option autoRecomputation",
        ),
        (lambda o: o._Popart.set("autoRecompute", 3), "Unknown uint64 option autoRecompute"),
        (lambda o: o._Popart.setEngineOptions({"debug.allowOutOfMemory": True}), "str to str"),
        (
            lambda o: o._Popart.setEngineOptions({"autoReport.outputGraphProfil": "true"}),
            "Unrecognised",
        ),
    ]
    for configure, message in cases:
        opts = poptorch.Options()
        configure(opts)
        training = poptorch.trainingModel(_with_loss(build_model(SMALL_CNN, 10, "cpu")), opts)
        with pytest.raises(poptorch.Error, match=message):
            training.compile(torch.zeros(4, 3, 32, 32), torch.zeros(4, dtype=torch.long))


def test_compile_needs_the_full_host_batch_and_pipelining_needs_accumulation(
    poptorch: Any,
) -> None:
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(4)
    training = poptorch.trainingModel(_with_loss(build_model(SMALL_CNN, 10, "cpu")), opts)
    with pytest.raises(AssertionError, match="Invalid batch dimension"):
        training.compile(torch.zeros(4, 3, 32, 32), torch.zeros(4, dtype=torch.long))

    p, c = problem(), Config(ipus_per_replica=2, splits=("block2",), gradient_accumulation=2)
    _, error, _ = compile_snippet(poptorch, p, c)
    assert error.type == "poptorch_cpp_error"
    assert (
        "gradientAccumulation must be greater than or equal to the number of pipeline stages (3)"
        in error.message
    )


def test_optimizers_take_poptorch_kwargs_and_assert_like_poptorch(poptorch: Any) -> None:
    params = list(torch.nn.Linear(2, 2).parameters())
    optim = poptorch.optim
    half = torch.float16
    optim.SGD(
        params, lr=0.1, momentum=0.9, loss_scaling=128.0, accum_type=half, velocity_accum_type=half
    )
    optim.SGD(params, lr=0.1, momentum=0.9, use_combined_accum=True, max_grad_norm=1.0)
    optim.AdamW(
        params,
        lr=1e-3,
        accum_type=half,
        first_order_momentum_accum_type=half,
        second_order_momentum_accum_type=torch.float32,
        max_grad_norm=1.0,
        bias_correction=False,
    )
    optim.LAMB(params, lr=1e-3, max_weight_norm=10.0, accum_type=half)
    optim.RMSprop(params, lr=1e-3, use_tf_variant=True, accum_type=half)
    with pytest.raises(AssertionError, match="Accumulation types"):
        optim.Adam(params, lr=1e-3, accum_type=torch.bfloat16)
    with pytest.raises(TypeError):
        optim.LAMB(params, lr=1e-3, max_grad_norm=1.0)
    with pytest.raises(TypeError):
        optim.RMSprop(params, lr=1e-3, max_grad_norm=1.0)
    with pytest.raises(TypeError):
        optim.SGD(params)  # lr is required
    with pytest.raises(AssertionError, match="AMSGrad"):
        optim.Adam(params, amsgrad=True)


def test_blocks_and_wrapping_follow_poptorch_rules(poptorch: Any) -> None:
    model = build_model(SMALL_CNN, 10, "cpu")
    poptorch.BeginBlock(model.block2, ipu_id=1)
    with pytest.raises(poptorch.Error, match="already been assigned to a block"):
        poptorch.BeginBlock(model.block2, ipu_id=1)
    poptorch.removeBlocks(model)
    poptorch.BeginBlock(model.block2, ipu_id=1)  # fine after removeBlocks

    wrapped = _with_loss(build_model(SMALL_CNN, 10, "cpu"))
    training = poptorch.trainingModel(wrapped, poptorch.Options())
    with pytest.raises(RuntimeError, match="already been wrapped"):
        poptorch.trainingModel(wrapped, poptorch.Options())
    training.destroy()  # not compiled: returns without unwrapping (pitfall 9.1)
    with pytest.raises(RuntimeError, match="already been wrapped"):
        poptorch.trainingModel(wrapped, poptorch.Options())

    offline = poptorch.Options().useOfflineIpuTarget(2)
    training = poptorch.trainingModel(_with_loss(build_model(SMALL_CNN, 10, "cpu")), offline)
    with pytest.raises(AssertionError, match="offline"):
        training(torch.zeros(2, 3, 32, 32), torch.zeros(2, dtype=torch.long))


def test_error_fields_live_on_the_class_and_oom_writes_a_profile(poptorch: Any) -> None:
    with fake_sdk() as fresh:  # a fresh import: nothing raised yet
        assert not hasattr(fresh.Error, "type")
        p, c = problem(batch=2048), Config()
        _, error, report = compile_snippet(fresh, p, c)
        assert isinstance(error, fresh.Error)
        assert fresh.Error.type == "popart_exception"  # set on the class: the "last error"
        assert error.message.startswith(
            "Out of memory: Cannot fit all variable data onto one or more tiles"
        )
        memory = read_profile(not_none(find_profile(report)), ipus_per_replica=1)
    assert memory.total_overflow > 0 and memory.overflowing_tiles[0] > 0
    assert memory.max_tile_bytes[0] > memory.tile_capacity_bytes
    mean_tile = memory.required_bytes[0] / 1472
    assert memory.max_tile_bytes[0] > 1.1 * mean_tile  # an imbalance: OOM is per tile
    assert sum(memory.breakdown[0].values()) == memory.required_bytes[0]


def test_without_allow_out_of_memory_an_oom_leaves_no_profile(poptorch: Any) -> None:
    p = problem(batch=2048)
    ns: dict[str, Any] = {}
    exec(render_snippet(p, Config()), ns)
    model = ns["TrainingModel"](build_model(p.model, 10, "cpu"))
    opts = ns["make_options"]().useOfflineIpuTarget(2)
    report = new_report_dir()
    opts._Popart.setEngineOptions(
        {"autoReport.outputGraphProfile": "true", "autoReport.directory": report}
    )
    training = poptorch.trainingModel(model, opts, ns["make_optimizer"](model))
    with pytest.raises(poptorch.Error, match="Out of memory"):
        training.compile(torch.zeros(2048, 3, 32, 32), torch.zeros(2048, dtype=torch.long))
    assert find_profile(report) is None


@pytest.mark.slow
def test_the_fake_compile_disagrees_with_the_nominal_estimator_near_the_boundary(
    poptorch: Any,
) -> None:
    """The fake's hardware is not the estimator's model: near capacity their verdicts differ."""

    def nominal_fits(batch: int) -> bool:
        p = problem(batch=batch)
        return estimate(p, Config(), profile_for(p), NOMINAL).feasible

    def fake_fits(batch: int) -> bool:
        _, error, _ = compile_snippet(poptorch, problem(batch=batch), Config())
        assert error is None or "Out of memory" in error.message
        return error is None

    def largest_fitting(fits: Any) -> int:
        lo, hi = 8, 4096  # fits(lo), not fits(hi)
        assert fits(lo) and not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    nominal, fake = largest_fitting(nominal_fits), largest_fitting(fake_fits)
    print(f"largest micro-batch that fits: nominal estimator {nominal}, fake compile {fake}")
    assert fake < nominal
    assert nominal_fits(nominal) and not fake_fits(
        nominal
    )  # screening says fits, compile says OOM


def test_fake_profile_has_the_pva_paths_the_reference_lists(poptorch: Any) -> None:
    p, c = (
        problem(batch=64),
        Config(ipus_per_replica=2, replicas=2, splits=("block2",), gradient_accumulation=3),
    )
    _, error, report = compile_snippet(poptorch, p, c)
    assert error is None
    with fake_sdk():
        import pva

        report_obj = pva.openReport(str(find_profile(report)))
    target = report_obj.compilation.target
    assert (target.numIPUs, target.ipusPerReplica, target.numReplicas) == (4, 2, 2)
    assert target.bytesPerTile == 638_976 and target.tilesPerIpu == 1472
    tile = report_obj.compilation.ipus[1].tiles[0]
    assert tile.memory.total.includingGaps >= tile.memory.total.excludingGaps
    assert (
        tile.memory.alwaysLiveBytes + tile.memory.notAlwaysLiveBytes
        == tile.memory.total.excludingGaps
    )
    assert tile.memory.overflowed.includingGaps == 0
    assert tile.memory.category.vertexCode.total > 0
    assert len(report_obj.compilation.tiles) == 4 * 1472
    assert (
        max(s.notAlwaysLiveMemory.bytes for s in report_obj.compilation.livenessProgramSteps) > 0
    )
    assert json.loads(not_none(find_profile(report)).read_text())["fake"]["config"]["splits"] == [
        "block2"
    ]


def _with_loss(model: Any) -> Any:
    class WithLoss(torch.nn.Module):
        def __init__(self, net: Any) -> None:
            super().__init__()
            self.net = net
            self.loss = torch.nn.CrossEntropyLoss()

        def forward(self, x: Any, labels: Any) -> Any:
            out = self.net(x)
            return out, self.loss(out, labels)

    return WithLoss(model)
