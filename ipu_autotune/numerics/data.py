"""Batches for the statistics run: the user's loader (`module:function`) or random ones."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..errors import UsageError
from ..problem import Problem
from .running import first_line

#: samples per statistics step; see synthetic_batches.
STATS_BATCH_CAP = 16


def load_data(spec: str) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    """Batches from `module:function` (called without arguments)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--data '{spec}': write it as package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"--data '{spec}': cannot import {module_name} ({exc}); "
            "is it installed or on PYTHONPATH?"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"--data '{spec}': {module_name} has no function '{attr}'")
    try:
        batches = fn()
    except Exception as exc:
        raise UsageError(f"--data '{spec}' failed: {first_line(exc)}") from None
    if not isinstance(batches, Iterable):
        raise UsageError(
            f"--data '{spec}' returned {type(batches).__name__}, not an iterable of (inputs, "
            "labels)"
        )
    return batches


def capped(batches: Iterable[Any], cap: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for item in batches:
        if isinstance(item, (tuple, list)) and len(item) == 2:
            yield item[0][:cap], item[1][:cap]
        else:
            yield item  # collect_gradient_stats says what is wrong with it


def take(batches: Iterable[Any], steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first `steps` batches, cycling when there are fewer."""
    taken = []
    for item in batches:
        if not (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and all(isinstance(t, torch.Tensor) for t in item)
        ):
            raise UsageError(
                "each batch must be an (inputs, labels) pair of tensors, got "
                f"{type(item).__name__}"
            )
        taken.append((item[0].cpu(), item[1].cpu()))
        if len(taken) == steps:
            break
    if not taken:
        raise UsageError("the data gave no batches")
    return [taken[i % len(taken)] for i in range(steps)]


def synthetic_batches(
    problem: Problem, steps: int, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` batches of standard-normal inputs of the problem's shape and uniform random labels.

    Standard normal is what normalised images look like to the first layer. The batch is
    min(problem.batch_size, 16) to keep the run fast: parameter gradients of a mean-reduced
    loss are averages whose magnitude barely depends on the batch size, and the 1/batch factor
    of activation gradients is corrected in collect_gradient_stats (target_batch).
    """
    gen = torch.Generator().manual_seed(seed)
    batch = min(problem.batch_size, STATS_BATCH_CAP)
    return [
        (
            torch.randn(batch, *problem.input_shape, generator=gen),
            torch.randint(0, problem.num_classes, (batch,), generator=gen),
        )
        for _ in range(steps)
    ]
