"""poptorch.DataLoader (graphcore/poptorch `python/__init__.py`), shaped like the real one.

A torch DataLoader whose batch is the combined batch of one call: micro-batch x device
iterations x (replication factor // input group size) x gradient accumulation. Passing the
options freezes them. The real Async mode wraps the loader in an AsynchronousDataAccessor
(a separate process); the double keeps the mode it was given (`_mode`, fake-internal) and
iterates in this process, which is all a test of what the tuner emits needs.
"""

from __future__ import annotations

import torch

from .enums import DataLoaderMode


class DataLoader(torch.utils.data.DataLoader):
    def __init__(
        self,
        options,
        dataset,
        batch_size=1,
        shuffle=None,
        num_workers=0,
        drop_last=True,
        persistent_workers=None,
        auto_distributed_partitioning=True,
        mode=DataLoaderMode.Sync,
        async_options=None,
        rebatched_worker_size=None,
        batch_sampler=None,
        **kwargs,
    ):
        if not isinstance(mode, DataLoaderMode):
            raise ValueError(f"mode must be a poptorch.DataLoaderMode, got {mode!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self._options = options
        replicas = options.replication_factor // max(1, options.input_group_size)
        self._combined_batch_size = (
            batch_size
            * options.device_iterations
            * replicas
            * options.Training.gradient_accumulation
        )
        self._micro_batch_size = batch_size
        self._mode = mode
        self._async_options = dict(async_options or {})
        options._freeze()
        super().__init__(
            dataset,
            batch_size=self._combined_batch_size,
            shuffle=bool(shuffle),
            num_workers=num_workers,
            drop_last=drop_last,
            persistent_workers=bool(persistent_workers) if num_workers else False,
            **kwargs,
        )

    @property
    def combinedBatchSize(self) -> int:
        return self._combined_batch_size

    @property
    def options(self):
        return self._options
