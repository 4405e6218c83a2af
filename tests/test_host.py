"""The host side (issue 11): the pipeline model, the rules it adds, the space's bounds, the
snippet's DataLoader and learning rate, --data timing, and the PopTorch child's refusal."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest_fake_sdk import SMALL_CNN, fake_env, fake_sdk
from testing import not_none

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.export.python import render_snippet
from ipu_autotune.host import measure as host_measure, pipeline as host, recipe
from ipu_autotune.present.host_report import WORKSHOP_FINAL, lines, workshop_reference
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.space import SearchSpace

WORKSHOP = Problem("resnet101", 64)


# --- the pipeline model ----------------------------------------------------------------------


def test_sync_adds_host_and_device_and_async_overlaps_them() -> None:
    parts = {"device compute": 0.2, "host call": 0.003}
    sync = host.end_to_end(WORKSHOP, WORKSHOP_FINAL.replace(loader_mode="sync"), parts)
    overlapped = host.end_to_end(WORKSHOP, WORKSHOP_FINAL, parts)
    assert sync.call_time_s == pytest.approx(sync.host_input_s + 0.203)
    assert overlapped.call_time_s == pytest.approx(max(overlapped.host_input_s, 0.203))
    assert overlapped.throughput > sync.throughput


def test_the_bottleneck_is_the_largest_share_of_a_call() -> None:
    slow_device = host.end_to_end(
        WORKSHOP, WORKSHOP_FINAL, {"device compute": 5.0, "host call": 0.003}
    )
    assert (
        slow_device.bottleneck == "device compute"
        and slow_device.bottleneck_share == pytest.approx(5.0 / slow_device.call_time_s)
    )
    slow_host = host.end_to_end(WORKSHOP, WORKSHOP_FINAL, {"device compute": 0.01})
    assert slow_host.bottleneck == "host input" and slow_host.bottleneck_share == pytest.approx(
        1.0
    )
    reduce = host.end_to_end(
        WORKSHOP,
        WORKSHOP_FINAL.replace(loader_workers=4),
        {"device compute": 0.01, "all-reduce": 0.3},
    )
    assert reduce.bottleneck == "all-reduce"


def test_eight_bit_io_removes_the_host_cast_not_just_bytes() -> None:
    parts = {"device compute": 0.2}
    float_path = host.end_to_end(WORKSHOP, WORKSHOP_FINAL.replace(eight_bit_io=False), parts)
    uint8_path = host.end_to_end(WORKSHOP, WORKSHOP_FINAL, parts)
    assert (
        float_path.host_input_s / uint8_path.host_input_s > 3
    )  # the workshop measured 3.3x end to end
    assert host.sample_bytes(WORKSHOP, WORKSHOP_FINAL) == 3 * 64 * 64 + 8
    assert (
        host.sample_bytes(WORKSHOP, WORKSHOP_FINAL.replace(eight_bit_io=False))
        == 2 * 3 * 64 * 64 + 8
    )


def test_workers_speed_up_the_host_and_cost_buffers() -> None:
    parts = {"device compute": 0.01}
    one = host.end_to_end(WORKSHOP, WORKSHOP_FINAL, parts)
    four = host.end_to_end(WORKSHOP, WORKSHOP_FINAL.replace(loader_workers=4), parts)
    assert four.host_input_s < one.host_input_s / 3
    assert host.loader_buffers(WORKSHOP_FINAL.replace(loader_workers=4)) > host.loader_buffers(
        WORKSHOP_FINAL
    )
    assert host.loader_buffers(Config()) == 1


def test_every_estimate_carries_end_to_end_fields() -> None:
    m = EstimateBackend().measure(WORKSHOP, WORKSHOP_FINAL)
    assert not_none(m.throughput) < not_none(m.device_throughput)
    assert m.samples_per_call == 64 * 8 * 4 and m.host_bytes_per_call == 2048 * (3 * 64 * 64 + 8)
    assert m.bottleneck in host.BOTTLENECKS and 0 < not_none(m.bottleneck_share) <= 1
    d = m.to_dict()
    for key in (
        "device_throughput",
        "samples_per_call",
        "host_bytes_per_call",
        "bottleneck",
        "bottleneck_share",
        "throughput",
        "step_time_s",
    ):  # added, never renamed
        assert key in d


def test_measured_host_costs_replace_the_workshop_defaults() -> None:
    slow = Problem("resnet101", 64, host_float_sample_s=1e-2, host_uint8_sample_s=5e-3)
    assert host.host_costs(WORKSHOP) is host.WORKSHOP
    assert host.host_costs(slow).uint8_sample_s == 5e-3
    assert not_none(EstimateBackend().measure(slow, WORKSHOP_FINAL).throughput) < not_none(
        EstimateBackend().measure(WORKSHOP, WORKSHOP_FINAL).throughput
    )


# --- rules ------------------------------------------------------------------------------------


def test_rules_bound_one_call_and_the_global_batch() -> None:
    assert violations(WORKSHOP, WORKSHOP_FINAL) == []
    too_many = WORKSHOP_FINAL.replace(device_iterations=128)  # 65,536 samples > 50,000
    assert any("one call needs 65,536 samples" in v for v in violations(WORKSHOP, too_many))
    small_host = Problem("resnet101", 64, host_memory_gb=0.05)
    assert any(
        "host memory" in v for v in violations(small_host, WORKSHOP_FINAL)
    )  # 25 MB x 3 buffers
    big = WORKSHOP_FINAL.replace(gradient_accumulation=64)  # 4,096 > 2,048
    assert any("above the ceiling 2048" in v for v in violations(WORKSHOP, big))
    assert violations(Problem("resnet101", 64, max_global_batch=4096), big) == []


def test_fine_tuning_a_transformer_has_a_lower_global_batch_ceiling() -> None:
    """A task head on a pretrained body trains at a few hundred samples per update; 2,048
    would leave a 50,000-example task set 24 updates an epoch. Pretraining keeps 2,048."""
    from ipu_autotune.options import DEFAULT_STORAGE
    from ipu_autotune.options.problem_flags import resume_command

    bert = Problem("hf:bert-base-uncased", 8)  # sequence-classification by default
    assert bert.max_global_batch == 256
    assert Problem("hf:bert-base-uncased", 8, task="question-answering").max_global_batch == 256
    assert Problem("hf:gpt2", 1, task="causal-lm").max_global_batch == 2048
    assert Problem("hf:bert-base-uncased", 8, task="masked-lm").max_global_batch == 2048
    assert Problem("resnet101", 64).max_global_batch == 2048
    assert Problem("hf:bert-base-uncased", 8, max_global_batch=1024).max_global_batch == 1024
    assert (
        Problem.from_dict({"model": "hf:bert-base-uncased", "batch_size": 8}).max_global_batch
        == 256
    )
    # The default is not a choice the study name or the resume command has to spell out.
    assert "max" not in bert.slug and "--max-global-batch" not in resume_command(
        bert, DEFAULT_STORAGE, bert.slug
    )
    told = Problem("hf:bert-base-uncased", 8, max_global_batch=2048)
    assert told.slug != bert.slug and "--max-global-batch 2048" in resume_command(
        told, DEFAULT_STORAGE, told.slug
    )
    config = SearchSpace.load(bert).sample(_Max(), bert, profile_for(bert))
    assert host.global_batch(bert, config) <= 256


# --- the search space --------------------------------------------------------------------------


class _Max:
    """A trial that always answers the largest value: the worst case for the bounds."""

    def suggest_categorical(self, name: Any, choices: Any) -> Any:
        return choices[-1]

    def suggest_int(self, name: Any, low: Any, high: Any, log: Any = False, step: Any = 1) -> Any:
        return high

    def suggest_float(
        self, name: Any, low: Any, high: Any, log: Any = False, step: Any = None
    ) -> Any:
        return high


@pytest.mark.parametrize(
    "problem",
    [
        WORKSHOP,
        Problem("resnet101", 64, dataset_size=5000, host_memory_gb=0.5),
        Problem("resnet101", 64, ipus=16),
    ],
    ids=["default", "small", "16ipu"],
)
def test_sampled_configs_stay_within_one_epoch_host_memory_and_the_ceiling(problem: Any) -> None:
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    config = space.sample(_Max(), problem, profile)
    assert config.loader_mode == "async" and config.loader_workers == 4
    assert host.samples_per_call(problem, config) <= problem.dataset_size
    assert host.host_bytes_needed(problem, config) <= problem.host_memory_gb * 1e9
    assert host.global_batch(problem, config) <= problem.max_global_batch
    assert violations(problem, config, profile.module_order) == []


@pytest.mark.slow
def test_micro_batch_is_off_by_default_and_a_knob_on_request() -> None:
    profile = profile_for(WORKSHOP)
    assert SearchSpace.load(WORKSHOP).micro_batches(WORKSHOP) == [64]
    space = SearchSpace.load(WORKSHOP).with_knob("micro_batch", "search", "--micro-batch")
    assert space.micro_batches(WORKSHOP)[:3] == [1, 2, 4]
    config = space.sample(_Max(), WORKSHOP, profile)
    assert config.micro_batch == 512 and host.global_batch(WORKSHOP, config) <= 2048
    ranged = SearchSpace.load(WORKSHOP).with_knob(
        "micro_batch", {"low": 8, "high": 32, "log": True}, "--micro-batch"
    )
    assert ranged.sample(_Max(), WORKSHOP, profile).micro_batch == 32
    # The estimator measures the config's micro-batch, not the problem's.
    small = EstimateBackend().measure(WORKSHOP, WORKSHOP_FINAL.replace(micro_batch=16))
    assert sum(small.required_bytes) < sum(
        EstimateBackend().measure(WORKSHOP, WORKSHOP_FINAL).required_bytes
    )


@pytest.mark.slow
def test_micro_batch_knob_solves_a_fixed_global_batch_that_does_not_fit() -> None:
    """Global batch fixed at 512 on 2 IPUs: with the micro-batch free, some config fits."""
    problem = Problem("resnet101", 256, global_batch=512)
    profile = profile_for(problem)
    space = SearchSpace.load(problem).with_knob("micro_batch", "search", "--micro-batch")
    mbs = {space.sample(_Max(), problem, profile).micro_batch}
    assert all(512 % (m or 256) == 0 for m in mbs)
    config = WORKSHOP_FINAL.replace(micro_batch=16, gradient_accumulation=32, device_iterations=1)
    assert violations(problem, config) == []


# --- the recipe ----------------------------------------------------------------------------------


def test_learning_rate_rules() -> None:
    adam = not_none(recipe.scaling("adamw", 1e-3, 192, 2048))
    assert adam.rule == "square root" and adam.lr == pytest.approx(
        1e-3 * math.sqrt(2048 / 192), rel=1e-2
    )
    sgd = not_none(recipe.scaling("sgd", 0.1, 256, 1024))
    assert sgd.rule == "linear" and sgd.lr == pytest.approx(0.4)
    assert recipe.scaling("adamw", 1e-3, 512, 512) is None


def test_snippet_scales_the_rate_and_builds_the_data_loader_the_config_names() -> None:
    config = WORKSHOP_FINAL.replace(gradient_accumulation=32, loader_workers=2)
    source = render_snippet(WORKSHOP, config, base_global_batch=192)
    assert "def make_optimizer(model, lr=0.00327):" in source
    assert (
        "Base rate 0.001 at global batch 192" in source and "square root rule for adamw" in source
    )
    assert "mode=poptorch.DataLoaderMode.Async" in source and "LOADER_WORKERS = 2" in source
    assert "no Normalize on the" in source  # 8-bit I/O: the host skips the cast and normalisation
    unchanged = render_snippet(WORKSHOP, WORKSHOP_FINAL, base_global_batch=512)
    assert "def make_optimizer(model, lr=0.001):" in unchanged and "Base rate" not in unchanged


def test_transformers_start_from_their_own_learning_rate() -> None:
    """Adam's 1e-3 is an image-model default; BERT fine-tuning starts from transformers' 5e-5."""
    bert = Problem("hf:bert-base-uncased", 8, seq_len=128, ipus=4, optimizer="adamw")
    config = Config(
        gradient_accumulation=32, replicas=2, ipus_per_replica=2, splits=("bert.encoder.layer.6",)
    )
    source = render_snippet(bert, config, base_global_batch=64)
    assert "Base rate 5e-05 at global batch 64" in source
    assert "def make_optimizer(model, lr=0.000141):" in source  # 5e-5 x sqrt(512/64)
    assert "lr=5e-05)" in render_snippet(bert, config, base_global_batch=512)


@pytest.mark.parametrize(
    "config",
    [
        WORKSHOP_FINAL,
        WORKSHOP_FINAL.replace(
            loader_mode="sync", loader_workers=2, micro_batch=16, device_iterations=2
        ),
    ],
    ids=["async", "sync-workers-mb16"],
)
def test_fake_sdk_sees_the_loader_the_config_names(config: Any) -> None:
    """What PopTorch is given recovers loader_mode, loader_workers and the micro-batch."""
    source = render_snippet(WORKSHOP, config)
    with fake_sdk() as poptorch:
        ns: dict[str, Any] = {"__name__": "snippet"}
        exec(compile(source, "best_options.py", "exec"), ns)
        opts = ns["make_options"]()
        data = torch.utils.data.TensorDataset(
            torch.zeros(8, 3, 4, 4, dtype=torch.uint8), torch.zeros(8).long()
        )
        loader = ns["make_loader"](opts, data)
        assert isinstance(loader, poptorch.DataLoader)
        mode = {poptorch.DataLoaderMode.Sync: "sync", poptorch.DataLoaderMode.Async: "async"}[
            loader._mode
        ]
        assert mode == config.loader_mode and loader.num_workers == config.loader_workers
        assert loader.combinedBatchSize == host.samples_per_call(WORKSHOP, config)
        assert loader.combinedBatchSize // (
            config.gradient_accumulation * config.device_iterations
        ) == host.micro_batch(WORKSHOP, config)
        with pytest.raises(AttributeError, match="frozen"):
            opts.deviceIterations(7)


# --- the summary ---------------------------------------------------------------------------------


def test_summary_names_both_bottlenecks_and_the_rate() -> None:
    from ipu_autotune.study.records import TrialRecord

    reference = workshop_reference(WORKSHOP)
    assert reference is not None and reference.bottleneck == "host input"
    assert workshop_reference(Problem("resnet50", 64)) is None
    best_config = WORKSHOP_FINAL.replace(gradient_accumulation=32, loader_workers=4)
    best = TrialRecord(
        number=5,
        origin="sampled",
        state="COMPLETE",
        config=best_config,
        measurement=EstimateBackend().measure(WORKSHOP, best_config),
    )
    base = TrialRecord(
        number=0,
        origin="baseline",
        state="COMPLETE",
        config=Config(gradient_accumulation=3),
        measurement=EstimateBackend().measure(WORKSHOP, Config()),
    )
    text = "\n".join(lines(WORKSHOP, base, best, reference))
    assert "best: bottleneck device compute" in text and "workshop's final config" in text
    assert "bottleneck host input" in text and "192 -> 2,048" in text and "square root" in text


# --- --data --------------------------------------------------------------------------------------


class _Images(torch.utils.data.Dataset[Any]):
    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype

    def __len__(self) -> Any:
        return 100

    def __getitem__(self, i: Any) -> Any:
        return torch.zeros(3, 16, 16, dtype=self.dtype), 0


def test_data_is_timed_per_sample_for_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(
        host_measure,
        "load_data",
        lambda spec: torch.utils.data.DataLoader(_Images(torch.uint8), batch_size=10),
    )
    m = host_measure.measure("x:y", seconds=0.2, progress=lambda n, t: seen.append(n))
    assert m.measured_path == "uint8" and m.samples >= 10 and seen and seen[-1] == m.samples
    assert m.float_sample_s > m.uint8_sample_s > 0


def test_a_map_style_dataset_is_accepted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "host_data_mod.py").write_text(
        "import torch\n"
        "class D(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 5\n"
        "    def __getitem__(self, i): return torch.ones(3, 8, 8), 1\n"
        "def make(): return D()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    m = host_measure.measure("host_data_mod:make", seconds=0.1)
    assert m.measured_path == "float" and m.float_sample_s >= m.uint8_sample_s > 0
    sys.modules.pop("host_data_mod", None)


# --- the PopTorch child --------------------------------------------------------------------------


@pytest.mark.slow
def test_poptorch_child_refuses_a_call_too_large_for_host_memory_before_allocating(
    tmp_path: Path,
) -> None:
    """Against the fake SDK, in a real trial subprocess: the reason comes back as an invalid
    Measurement, and the child never built the host batch (no 'compiling: host batch' line)."""
    from ipu_autotune.backends.poptorch import PopTorchBackend, child

    problem = Problem(
        model=SMALL_CNN,
        batch_size=16,
        input_shape=(3, 32, 32),
        num_classes=10,
        ipus=2,
        host_memory_gb=0.01,
    )
    config = Config(
        ipus_per_replica=2, splits=("block2",), gradient_accumulation=3, device_iterations=64
    )
    assert child.refusal(problem, config) is not None
    backend = PopTorchBackend(tmp_path, env=fake_env(), timeout_s=120.0)
    m = backend.measure(problem, config)
    assert (m.feasible, m.failure) == (False, "invalid")
    assert (
        m.reason.startswith("refused before allocating the host batch")
        and "--host-memory 0.01 GB" in m.reason
    )
    log = (tmp_path / "trial-0001" / "trial.log").read_text()
    assert "refused before allocating" in log
    assert "building" not in log and "compiling: host batch" not in log  # nothing was allocated
    assert child.refusal(problem, config.replace(device_iterations=1)) is None


def test_text_problems_load_ready_token_rows_not_images() -> None:
    """Token ids are collated from a pre-tokenised dataset: no image decode or augmentation on
    the host, int64 ids and masks on the wire, and the task's labels (one per token for MLM)."""
    from ipu_autotune.host import pipeline

    mlm = Problem("hf:bert-base-uncased", 8, seq_len=128, ipus=4, task="masked-lm")
    costs = pipeline.host_costs(mlm)
    assert (
        "pre-tokenised" in costs.source
        and costs.sample_s(Config()) < pipeline.WORKSHOP.float_sample_s / 5
    )
    assert (
        pipeline.sample_bytes(mlm, Config(precision="16.16")) == 128 * 8 * 2 + 128 * 8
    )  # ids, mask; labels
    classify = Problem("hf:bert-base-uncased", 8, seq_len=128, ipus=4)
    assert pipeline.sample_bytes(classify, Config()) == 128 * 8 * 2 + 8
    # Gathered masked tokens: 20 positions in, 20 labels (not one per token).
    gathered = Problem(
        "hf:bert-base-uncased", 8, seq_len=128, ipus=4, task="masked-lm", max_predictions=20
    )
    assert pipeline.sample_bytes(gathered, Config()) == 128 * 8 * 2 + 20 * 8 + 20 * 8
    # Costs measured with --data still win over the assumption.
    measured = Problem("hf:bert-base-uncased", 8, seq_len=128, ipus=4, host_float_sample_s=1e-3)
    assert pipeline.host_costs(measured).float_sample_s == 1e-3
