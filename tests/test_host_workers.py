"""--data times the loader with 1, 2, 4, 8 workers (as the cores allow), the host model uses
what it measured instead of 0.9 of a process per worker, and without --data the summary
names the assumption a host-input bottleneck rests on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.errors import UsageError
from ipu_autotune.host import pipeline as host, workers
from ipu_autotune.present.host_report import WORKSHOP_FINAL, lines
from ipu_autotune.problem import Config, Problem
from ipu_autotune.study.records import TrialRecord

WORKSHOP = Problem("resnet101", 64, input_shape=(3, 64, 64), optimizer="adamw", ipus=2)

#: a loader whose per-sample cost is waiting (as on a file system), so workers overlap it
#: whatever else the machine's cores are doing
SLOW_DATA = """
import time
import torch

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.zeros(3, 8, 8, dtype=torch.uint8), 0

def make():
    return Slow()

def stream():
    return iter([(torch.zeros(4, 3, 8, 8), torch.zeros(4))] * 1000)
"""


@pytest.fixture
def slow_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    (tmp_path / "slow_loader_data.py").write_text(SLOW_DATA)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("slow_loader_data", None)


def test_worker_counts_stop_at_the_cores() -> None:
    assert workers.worker_counts(cores=1) == [1]
    assert workers.worker_counts(cores=3) == [1, 2]
    assert workers.worker_counts(cores=64) == [1, 2, 4, 8]


def test_speedup_interpolates_the_measured_counts_and_never_extrapolates() -> None:
    measured = (1.0, 1.8, 2.6)  # 1, 2, 4 workers
    assert workers.speedup(0, measured) == workers.speedup(1, measured) == 1.0
    assert workers.speedup(2, measured) == pytest.approx(1.8)
    assert workers.speedup(3, measured) == pytest.approx(1.8 + 0.8 * (1.585 - 1), abs=1e-3)
    assert workers.speedup(8, measured) == workers.speedup(16, measured) == pytest.approx(2.6)


@pytest.mark.slow
def test_waiting_loaders_speed_up_with_workers(slow_data: Any) -> None:
    import slow_loader_data

    scaling = workers.measure_scaling(slow_loader_data.make(), seconds=0.6, counts=(1, 2))
    assert scaling.counts == (1, 2) and scaling.speedups[0] == 1.0
    assert scaling.speedups[1] > 1.4, scaling  # two workers sleeping side by side
    assert "2 workers 1." in scaling.line() or "2 workers 2." in scaling.line()


def test_a_plain_iterable_is_not_split_and_keeps_the_assumption(slow_data: Any) -> None:
    import slow_loader_data

    with pytest.raises(workers.NotMeasured, match="plain iterable"):
        workers.measure_scaling(slow_loader_data.stream())


def test_a_dataset_that_fails_in_workers_keeps_the_assumption() -> None:
    class Broken(torch.utils.data.Dataset[Any]):
        def __len__(self) -> Any:
            return 4

        def __getitem__(self, i: Any) -> None:
            raise RuntimeError("no such file\nsecond line")

    with pytest.raises(
        workers.NotMeasured, match=r"^reading with 1 worker\(s\) failed: RuntimeError: [^\n]*$"
    ):
        workers.measure_scaling(Broken(), seconds=0.1, counts=(1,))


@pytest.mark.slow
def test_the_host_model_uses_the_measured_speedups_instead_of_the_assumption() -> None:
    config = WORKSHOP_FINAL.replace(
        loader_workers=4, gradient_accumulation=32, device_iterations=24
    )
    parts = {"device compute": 0.01, "weight update": 0.0, "all-reduce": 0.0, "host call": 0.003}
    assumed = host.end_to_end(WORKSHOP, config, parts)
    measured = host.end_to_end(
        Problem(**{**WORKSHOP.to_dict(), "host_worker_speedups": [1.0, 1.5, 1.6]}), config, parts
    )
    n = host.samples_per_call(WORKSHOP, config)
    single = n * host.WORKSHOP.uint8_sample_s + host.WORKSHOP.call_s
    assert assumed.host_input_s == pytest.approx(single / (1 + 3 * 0.9))
    assert measured.host_input_s == pytest.approx(single / 1.6)
    assert measured.throughput < assumed.throughput


def test_the_measured_speedups_round_trip_and_bad_ones_are_refused() -> None:
    p = Problem(**{**WORKSHOP.to_dict(), "host_worker_speedups": [1.0, 1.9]})
    assert Problem.from_dict(p.to_dict()) == p and p.to_dict()["host_worker_speedups"] == [
        1.0,
        1.9,
    ]
    assert "host_worker_speedups" not in WORKSHOP.to_dict()
    assert p.slug == WORKSHOP.slug  # measured a little differently on every run
    with pytest.raises(UsageError, match="speed-ups at 1, 2, 4 and 8 workers"):
        Problem.from_dict({**WORKSHOP.to_dict(), "host_worker_speedups": [1.0, -2]})


def _summary(problem: Problem, config: Config) -> str:
    best = TrialRecord(
        number=1,
        origin="sampled",
        state="COMPLETE",
        config=config,
        measurement=EstimateBackend().measure(problem, config),
    )
    return "\n".join(lines(problem, None, best))


def test_without_data_the_summary_names_what_a_host_bottleneck_rests_on() -> None:
    # the default run's best (README): its host input takes 90% of a call, but the IPUs' parts
    # together (compute 65%, the weight update 33%, ...) take all of it: the device limits it
    best = Config(
        precision="16.16",
        partials="half",
        optimizer_state="half",
        loss_scaling=16.0,
        ipus_per_replica=1,
        replicas=2,
        splits=(),
        recompute="standard",
        available_memory_proportion=(0.6,),
        optimizer_offload=True,
        replicated_tensor_sharding=True,
        gradient_accumulation=16,
        device_iterations=24,
        eight_bit_io=True,
        loader_workers=4,
    )
    text = _summary(WORKSHOP, best)
    assert "bottleneck device compute, 65% of a call" in text and "rests on" not in text
    # the same with float input: the host's 0.82 ms a sample outlasts the IPUs
    config = best.replace(eight_bit_io=False)
    text = _summary(WORKSHOP, config)
    assert "bottleneck host input, 100% of a call" in text
    assert (
        "rests on: host cost per sample 0.82 ms (calibrated on the workshop's epoch times)" in text
    )
    assert "4 loader workers each adding 0.9 of a process (assumed)" in text
    measured = Problem(
        **{
            **WORKSHOP.to_dict(),
            "host_worker_speedups": [1.0, 1.9, 3.5],
            "host_float_sample_s": 8e-4,
            "host_uint8_sample_s": 2e-4,
        }
    )
    assert "rests on" not in _summary(measured, config)
    # a device-bound best rests on no host assumption
    assert "rests on" not in _summary(
        WORKSHOP, WORKSHOP_FINAL.replace(loader_workers=4, gradient_accumulation=32)
    )


@pytest.mark.slow
def test_estimate_with_data_measures_and_uses_the_worker_scaling(slow_data: Any) -> None:
    config = slow_data / "c.toml"
    config.write_text(
        '[config]\nprecision = "16.16"\noptimizer_state = "half"\nipus_per_replica = 2\n'
        'splits = ["layer3.8"]\ngradient_accumulation = 8\ndevice_iterations = 4\n'
        'eight_bit_io = true\nloader_mode = "async"\nloader_workers = 2\n'
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(slow_data), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ipu_autotune",
            "estimate",
            "resnet101",
            "--batch-size",
            "64",
            "--image-size",
            "64",
            "--config",
            str(config),
            "--data",
            "slow_loader_data:make",
            "--json",
        ],
        cwd=slow_data,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    problem = json.loads(out.stdout)["problem"]
    speedups = problem["host_worker_speedups"]
    assert len(speedups) == len(workers.worker_counts()) and speedups[0] == 1.0
    if len(speedups) > 1:
        assert speedups[1] > 1.3, speedups
