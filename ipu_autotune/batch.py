"""Batch arithmetic, in one place: the micro-batch a config runs, the samples per weight
update (global batch) and per call of the training model, and the accumulation a fixed
global batch implies. The Problem is never rewritten to change the micro-batch: whoever
needs the micro-batch asks `micro_batch(problem, config)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .problem import Config, Problem


def micro_batch(problem: Problem, config: Config) -> int:
    """The config's micro-batch, else the problem's (the micro_batch knob is off by default)."""
    return config.micro_batch or problem.batch_size


def global_batch(problem: Problem, config: Config) -> int:
    """Samples per weight update: micro-batch x GA x replicas."""
    return micro_batch(problem, config) * config.gradient_accumulation * config.replicas


def samples_per_call(problem: Problem, config: Config) -> int:
    """What one call of the training model consumes: micro-batch x GA x replicas x DI."""
    return global_batch(problem, config) * config.device_iterations


def accumulation_for_global_batch(
    problem: Problem, replicas: int, micro: int | None = None
) -> int | None:
    """The accumulation that makes `micro` (default: the problem's micro-batch) x replicas
    the problem's fixed global batch; None when it does not divide it."""
    assert problem.global_batch is not None, "only for a problem with a fixed global batch"
    per_update = (micro or problem.batch_size) * replicas
    if problem.global_batch % per_update:
        return None
    return problem.global_batch // per_update
