"""Running a model on the CPU for measurement: idle cores only, the model left as it was."""

from __future__ import annotations

import contextlib
import copy
import glob
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ..errors import UsageError

#: the layers whose gradients and partial sums are measured
MATMUL_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _idle_cores() -> int:
    """Cores this process may use that no other process is running on right now.

    PyTorch's OpenMP threads spin while they wait: two threads on two cores that another
    process also wants run several times slower than one thread.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        with open("/proc/loadavg") as fh:
            running = int(fh.read().split()[3].split("/")[0])  # runnable threads, system-wide
    except (OSError, ValueError, IndexError):
        return cores
    return max(1, min(cores, cores - (running - _own_running_threads())))


def _own_running_threads() -> int:
    """This process's runnable threads (at least this one), so they do not count as others."""
    own = 0
    for stat in glob.glob("/proc/self/task/*/stat"):
        try:
            with open(stat) as fh:
                own += fh.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            pass
    return max(own, 1)


@contextlib.contextmanager
def cpu_threads() -> Iterator[None]:
    """Use the idle cores for this run, and put PyTorch's setting back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(_idle_cores())
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def preserved(model: nn.Module) -> Iterator[None]:
    """Run on `model`, leaving its weights, buffers (BN statistics), mode and grads unchanged."""
    state = copy.deepcopy(model.state_dict())
    training = model.training
    grads = {p: p.grad for p in model.parameters()}
    try:
        yield
    finally:
        model.load_state_dict(state)
        model.train(training)
        for p, g in grads.items():
            p.grad = g


def logits(output: Any) -> torch.Tensor:
    """The main output of models that return extras in training (Inception, GoogLeNet)."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        found: torch.Tensor = output.logits
        return found
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise UsageError(f"the model returned {type(output).__name__}; return the logits tensor")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
