"""The host input pipeline measured from the user's own data (`--data module:fn`).

`fn()` returns a Dataset (map-style), a DataLoader, or any iterable of (inputs, labels)
batches or samples. It is timed on this CPU for a few seconds; the result is seconds per
sample for one loader process (a DataLoader's time is multiplied back by its workers' measured
speed-up, host/workers.py),
for the path the data takes (uint8 images: the 8-bit I/O path; floats: the float path).
The other path is derived by adding or removing the cast and normalisation, timed here on
one of the user's samples.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UsageError
from ..numerics.data import load_data

#: seconds spent reading the user's data
DEFAULT_SECONDS = 3.0
#: the uint8 path is never taken as cheaper than this share of the float path
MIN_UINT8_SHARE = 0.1


@dataclass(frozen=True)
class MeasuredHost:
    float_sample_s: float
    uint8_sample_s: float
    samples: int
    seconds: float
    measured_path: str  # "uint8" or "float"

    def line(self) -> str:
        return (
            f"host input measured on this CPU: {self.samples:,} samples in {self.seconds:.1f} s "
            f"({self.measured_path} data); float path {self.float_sample_s * 1e3:.3f} ms/sample, "
            f"uint8 path {self.uint8_sample_s * 1e3:.3f} ms/sample per loader process"
        )


def load(spec: str) -> Any:
    """What `fn()` returns. numerics.load_data does the import and error messages; it wants
    an iterable, so a map-style Dataset (len and __getitem__ only) is fetched again here."""
    try:
        return load_data(spec)
    except UsageError as exc:
        if "not an iterable" not in str(exc):
            raise
    module_name, _, attr = spec.partition(":")
    data = getattr(importlib.import_module(module_name), attr)()
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        return data
    raise UsageError(
        f"--data '{spec}' returned {type(data).__name__}: return a Dataset, a DataLoader "
        "or an iterable of (inputs, labels)"
    )


def _inputs(item: object) -> object:
    return item[0] if isinstance(item, (tuple, list)) and item else item


def _count(x: object) -> int:
    """Samples in one item: a batch's first dimension for a DataLoader's batches, else 1."""
    return int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() >= 4 else 1


def _normalise_cost(x: torch.Tensor, repeats: int = 20) -> float:
    """Seconds to cast one sample to float16 and normalise it, as a host transform would."""
    one = x[0] if x.dim() >= 4 else x
    mean, std = one.float().mean(), one.float().std() + 1e-6
    start = time.perf_counter()
    for _ in range(repeats):
        ((one.to(torch.float16) - mean) / std)
    return (time.perf_counter() - start) / repeats


def measure(
    spec: str,
    seconds: float = DEFAULT_SECONDS,
    progress: Callable[[int, float], None] | None = None,
    worker_speedups: Sequence[float] = (),
) -> MeasuredHost:
    """`worker_speedups` (host/workers.py): how a DataLoader's own workers really add up; without
    them its time is taken as `num_workers` processes' worth."""
    from .workers import speedup

    data = load(spec)
    workers = max(1, int(getattr(data, "num_workers", 0) or 0))
    parallel = speedup(workers, worker_speedups) if worker_speedups else workers
    if (
        hasattr(data, "__getitem__")
        and hasattr(data, "__len__")
        and not hasattr(data, "batch_size")
    ):
        if len(data) == 0:
            raise UsageError(f"--data '{spec}' returned an empty dataset; it must yield samples")
        items = (data[i % len(data)] for i in range(10**9))
    else:
        items = iter(data)
    samples, first = 0, None
    start = time.perf_counter()
    try:
        for item in items:
            x = _inputs(item)
            if first is None:
                first = x
            samples += _count(x)
            elapsed = time.perf_counter() - start
            if progress is not None:
                progress(samples, elapsed)
            if elapsed >= seconds:
                break
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(
            f"--data '{spec}': reading samples failed: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    elapsed = time.perf_counter() - start
    if samples == 0 or not isinstance(first, torch.Tensor):
        raise UsageError(
            f"--data '{spec}' yielded no samples (tensors or (inputs, labels)); "
            "return a Dataset or DataLoader with data in it"
        )
    per_sample = elapsed * parallel / samples
    normalise = _normalise_cost(first)
    if first.dtype == torch.uint8:
        return MeasuredHost(per_sample + normalise, per_sample, samples, elapsed, "uint8")
    uint8 = max(per_sample - normalise, MIN_UINT8_SHARE * per_sample)
    return MeasuredHost(per_sample, uint8, samples, elapsed, "float")
