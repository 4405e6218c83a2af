"""How the user's loader scales with worker processes, timed on this CPU (`--data module:fn`).

The host model (host/pipeline.py) divides one call's loading time by the loader's parallel
speed-up. Without a measurement it assumes each worker past the first adds 0.9 of a
process; with `--data` it uses what torch DataLoaders over the user's own dataset reached
here with 1, 2, 4 and 8 workers (as many as this CPU has cores), and never more than the
largest count measured.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

#: worker counts timed, capped by the cores this process may use
COUNTS = (1, 2, 4, 8)
#: seconds each count is timed for, after its first batch (the workers' start-up)
DEFAULT_SECONDS = 1.0
DEFAULT_BATCH = 16


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_counts(cores: int | None = None) -> list[int]:
    cores = cores or usable_cores()
    return [w for w in COUNTS if w <= cores] or [1]


@dataclass(frozen=True)
class WorkerScaling:
    counts: tuple[int, ...]
    speedups: tuple[float, ...]  # samples/s with that many workers over samples/s with one
    cores: int

    def line(self) -> str:
        measured = ", ".join(
            f"{w} workers {s:.2f}x"
            for w, s in zip(self.counts[1:], self.speedups[1:], strict=True)
        )
        last = self.counts[-1]
        return (
            f"loader speed-up over one worker, measured on this CPU ({self.cores} cores): "
            f"{measured or 'one worker only'}; more than {last} worker(s) count as {last}"
        )


def _map_style(data: Any) -> tuple[Any, int, Callable[..., Any] | None] | None:
    """(dataset, batch size, collate_fn) when workers can split the data, else None: a
    DataLoader's own dataset, or a Dataset with __len__ and __getitem__."""
    dataset = getattr(data, "dataset", None)
    if dataset is not None and hasattr(data, "batch_size"):
        return dataset, data.batch_size or 1, getattr(data, "collate_fn", None)
    if hasattr(data, "__getitem__") and hasattr(data, "__len__") and len(data) > 0:
        return data, DEFAULT_BATCH, None
    return None


def _rate(
    dataset: Any, batch: int, collate: Callable[..., Any] | None, workers: int, seconds: float
) -> float:
    """Samples per second once the workers are running."""
    from torch.utils.data import DataLoader

    n = len(dataset)
    indices = _Cycle(n)
    loader = DataLoader(
        dataset,
        batch_size=batch,
        sampler=indices,
        num_workers=workers,
        collate_fn=collate,
        persistent_workers=False,
    )
    it = iter(loader)
    try:
        next(it)  # start-up (forking, the first prefetch) is not what a training epoch pays
        samples, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            next(it)
            samples += batch
        return samples / (time.perf_counter() - start)
    finally:
        del it


class _Cycle:
    """Indices 0..n-1 over and over: enough samples for any timing, whatever the dataset's size."""

    def __init__(self, n: int):
        self.n = n

    def __iter__(self) -> Iterator[int]:
        i = 0
        while True:
            yield i % self.n
            i += 1

    def __len__(self) -> int:
        return 2**31


class NotMeasured(Exception):
    """Why the worker scaling could not be timed (the host model then keeps its assumption)."""


def measure_scaling(
    data: Any,
    seconds: float = DEFAULT_SECONDS,
    counts: Sequence[int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> WorkerScaling:
    """Speed-ups over one worker; NotMeasured when workers cannot split or read the data."""
    split = _map_style(data)
    if split is None:
        raise NotMeasured(
            "a plain iterable cannot be split among workers (return a Dataset or DataLoader)"
        )
    dataset, batch, collate = split
    counts = tuple(counts or worker_counts())
    rates = []
    for w in counts:
        if progress is not None:
            progress(w)
        try:
            rates.append(_rate(dataset, batch, collate, w, seconds))
        except (
            Exception
        ) as exc:  # the user's dataset in worker processes: keep the assumption, say why
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise NotMeasured(
                f"reading with {w} worker(s) failed: {type(exc).__name__}: {first}"
            ) from None
    return WorkerScaling(counts, tuple(round(r / rates[0], 3) for r in rates), usable_cores())


def speedup(workers: int, speedups: Sequence[float]) -> float:
    """The parallel speed-up of `workers` loader processes from speed-ups measured at
    1, 2, 4, ... workers: interpolated in log2(workers), held at the last one beyond it."""
    if workers <= 1 or not speedups:
        return 1.0
    x = math.log2(workers)
    if x >= len(speedups) - 1:
        return speedups[-1]
    low = int(x)
    return speedups[low] + (speedups[low + 1] - speedups[low]) * (x - low)
