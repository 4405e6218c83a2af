"""End-to-end throughput: the IPUs' call time plus the host input pipeline.

One call of a PopTorch training model consumes `samples_per_call` samples that the host
loader must produce. With `DataLoaderMode.Sync` and no workers the host builds them, then
the IPUs run: the two times add. With `DataLoaderMode.Async` (PopTorch's
AsynchronousDataAccessor, a separate process with a ring of `buffer_size=3` batches) or with
loader workers (torch DataLoader worker processes prefetching), loading overlaps the IPUs:
a call takes the longer of the two.

The default per-sample costs are **calibrated on the workshop's measured epoch times**
(tests/calibration/points.toml, `seed-epoch-*`: CIFAR-10 at 32x32, flip, resize to 64,
to tensor, and without 8-bit I/O also to float16 and normalise, one loader process). They
describe that machine and those transforms; `--data module:fn` replaces them with costs
measured on this CPU (host/measure.py).

Models with named inputs (`hf:` models, factories given `--input`) read ready tensors, not
images: a pre-tokenised dataset (`datasets.map` before training) only converts each row's
lists to tensors and collates them. `tensor_rows` costs that, per element, as measured
on this project's CI machine (2-core Xeon): `default_collate` of rows converted from Python
lists took 52 us per sample at 128 tokens, 132 at 512, 244 at 1,024 (ids and mask: 2 elements
per token, and a label).
Not calibrated on an IPU host; `--data module:fn` measures yours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

# The batch arithmetic is batch.py's; found here too, beside the host costs it feeds
# (re-exported: `X as X`).
from ..batch import (
    global_batch as global_batch,
    micro_batch as micro_batch,
    samples_per_call as samples_per_call,
)
from ..measurement import Measurement
from ..problem import Config, Problem

#: AsynchronousDataAccessor(buffer_size=3): batches the async loader keeps ready
ASYNC_BUFFERS = 3
#: torch DataLoader prefetch_factor default: batches each worker prepares ahead
WORKER_PREFETCH = 2
LABEL_BYTES = 8  # int64 class index per sample


@dataclass(frozen=True)
class HostCosts:
    """Seconds one loader process spends per sample, and per call (collate, hand-off)."""

    #: float path (cast to float16 and normalise on the host). Calibrated: seed-epoch-ga8 and
    #: seed-epoch-ga8-di4 differ by 1,536 samples per call and 1.40 s per call.
    float_sample_s: float = 0.82e-3
    #: uint8 path (8-bit I/O: no cast or normalisation on the host). Calibrated:
    #: seed-epoch-ga8-di4-8bit, 0.565 s per 2,048-sample call less the IPUs' share.
    uint8_sample_s: float = 0.18e-3
    #: fixed host cost per call on top of the samples. Calibrated: seed-epoch-ga8.
    call_s: float = 5e-3
    #: speed-up per extra loader worker process. Assumed, not calibrated (the workshop used
    #: no workers); --data measures the real scaling (worker_speedups) on your CPU.
    worker_efficiency: float = 0.9
    source: str = "calibrated on the workshop's epoch times"
    #: measured speed-ups over one worker at 1, 2, 4, ... workers (host/workers.py); empty: assumed
    worker_speedups: tuple[float, ...] = ()

    def sample_s(self, config: Config) -> float:
        return self.uint8_sample_s if config.eight_bit_io else self.float_sample_s


WORKSHOP = HostCosts()
#: seconds per sample for rows of ready tensors: a fixed part and one per element
TENSOR_ROW_S, TENSOR_ELEMENT_S = 25e-6, 0.107e-6  # fit to the three measurements above


def _named_inputs(problem: Problem) -> tuple[Any, ...]:
    from ..models.inputs import problem_inputs

    return problem_inputs(problem)


@lru_cache(maxsize=64)
def tensor_rows(problem: Problem) -> HostCosts:
    """Named inputs: collating rows of ready tensors (TENSOR_ROW_S), the same with or
    without 8-bit I/O, which only image inputs take."""
    elements = sum(math.prod(s.shape) for s in _named_inputs(problem))
    per = TENSOR_ROW_S + TENSOR_ELEMENT_S * elements
    return HostCosts(
        float_sample_s=per,
        uint8_sample_s=per,
        source="assumed: rows of ready (pre-tokenised) tensors, collated",
    )


def host_costs(problem: Problem) -> HostCosts:
    """The problem's measured costs (from --data) where it has them, else the workshop's."""
    default = tensor_rows(problem) if _named_inputs(problem) else WORKSHOP
    if problem.host_worker_speedups:
        default = replace(default, worker_speedups=tuple(problem.host_worker_speedups))
    if problem.host_float_sample_s is None and problem.host_uint8_sample_s is None:
        return default
    f = (
        problem.host_float_sample_s
        if problem.host_float_sample_s is not None
        else default.float_sample_s
    )
    u = (
        problem.host_uint8_sample_s
        if problem.host_uint8_sample_s is not None
        else default.uint8_sample_s
    )
    return replace(
        default, float_sample_s=f, uint8_sample_s=u, source="measured on this CPU with --data"
    )


def sample_bytes(problem: Problem, config: Config) -> int:
    """Host bytes of one sample as the loader hands it over (input and label)."""
    if _named_inputs(problem):
        return _named_sample_bytes(problem)
    elements = math.prod(problem.input_shape)
    if config.eight_bit_io:
        per = 1
    else:
        per = 2 if config.half_compute else 4
    return elements * per + LABEL_BYTES


@lru_cache(maxsize=64)
def _named_sample_bytes(problem: Problem) -> int:
    """One sample as the PopTorch child sends it (models/inputs.sample_batch, labels included for
    hf: models), in the loader's dtypes: int64 ids stay 64-bit on the host."""
    from ..models import hf
    from ..models.inputs import sample_batch

    label = 0 if hf.is_hf(problem.model) else LABEL_BYTES
    return sum(t.numel() * t.element_size() for t in sample_batch(problem, 1).values()) + label


def loader_buffers(config: Config) -> int:
    """Calls' worth of samples alive on the host at once."""
    buffers = ASYNC_BUFFERS if config.loader_mode == "async" else 1
    return buffers + WORKER_PREFETCH * config.loader_workers


def host_bytes_per_call(problem: Problem, config: Config) -> int:
    return samples_per_call(problem, config) * sample_bytes(problem, config)


def host_bytes_needed(problem: Problem, config: Config) -> int:
    """One call's host bytes times the loader's buffering: what --host-memory bounds."""
    return host_bytes_per_call(problem, config) * loader_buffers(config)


def parallel_loaders(config: Config, costs: HostCosts) -> float:
    if config.loader_workers <= 1:
        return 1.0
    if costs.worker_speedups:
        from .workers import speedup

        return speedup(config.loader_workers, costs.worker_speedups)
    return 1.0 + (config.loader_workers - 1) * costs.worker_efficiency


def assumptions(problem: Problem, config: Config) -> list[str]:
    """What a host-input figure for this config rests on that --data did not measure."""
    costs = host_costs(problem)
    out = []
    if costs.source != "measured on this CPU with --data":
        out.append(f"host cost per sample {costs.sample_s(config) * 1e3:.2f} ms ({costs.source})")
    if config.loader_workers > 1 and not costs.worker_speedups:
        out.append(
            f"{config.loader_workers} loader workers each adding {costs.worker_efficiency:g} of "
            "a process (assumed)"
        )
    return out


def overlapped(config: Config) -> bool:
    return config.loader_mode == "async" or config.loader_workers > 0


@dataclass(frozen=True)
class EndToEnd:
    throughput: float  # samples/s, end to end
    call_time_s: float
    device_call_s: float
    host_input_s: float  # host time per call, after worker parallelism
    shares: dict[str, float]  # part -> fraction of the call
    bottleneck: str
    bottleneck_share: float


BOTTLENECKS = ("device compute", "host input", "host call", "all-reduce", "weight update")


def end_to_end(
    problem: Problem,
    config: Config,
    device_parts: dict[str, float],
    costs: HostCosts | None = None,
) -> EndToEnd:
    """Combine the IPUs' time per call (split into named parts) with the host pipeline.

    `device_parts` are seconds per call: "device compute", "weight update", "all-reduce",
    "host call" (the round trip of one call). The bottleneck is the side that takes longer,
    the host's input or the IPUs' parts together, and on the IPUs' side their largest part:
    with an overlapped loader the call lasts as long as the slower side, so naming the largest
    single share would call the host the limit while the IPUs' parts together outlast it.
    Each share is that part's time over the call (host input: 100% when the IPUs wait for it).
    """
    costs = costs or host_costs(problem)
    n = samples_per_call(problem, config)
    host_input = (n * costs.sample_s(config) + costs.call_s) / parallel_loaders(config, costs)
    device_call = sum(device_parts.values())
    call = max(host_input, device_call) if overlapped(config) else host_input + device_call
    parts = dict(device_parts)
    parts["host input"] = host_input
    shares = {k: v / call for k, v in parts.items() if call > 0}
    name = (
        "host input"
        if host_input >= device_call or not device_parts
        else max(device_parts, key=device_parts.__getitem__)
    )
    return EndToEnd(
        throughput=n / call,
        call_time_s=call,
        device_call_s=device_call,
        host_input_s=host_input,
        shares=shares,
        bottleneck=name,
        bottleneck_share=shares[name],
    )


def bottleneck_line(m: Measurement) -> str:
    """'device compute, 96% of a call' for a Measurement, or '' when it has none."""
    if not getattr(m, "bottleneck", None):
        return ""
    return f"{m.bottleneck}, {m.bottleneck_share:.0%} of a call"
