"""The numerics advice: one record of the three recommendations, how it is measured (`advise`)
and how it changes a config (`NumericsAdvice.apply`)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch

from ..errors import UsageError
from ..problem import Problem
from .answer import NumericsAdvice
from .data import STATS_BATCH_CAP, capped, load_data, synthetic_batches, take
from .loss_scale import loss_scale_table, recommend_loss_scale
from .optimizers import default_lr
from .partials import partials_advice
from .running import first_line
from .statistics import collect_gradient_stats
from .stochastic_rounding import stochastic_rounding_advice

#: samples for the partials forward pass
PARTIALS_BATCH_CAP = 8


#: advice measured in this process, by what it depends on: a torchvision model's (its name has
#: no ':') on synthetic batches is a pure function of them. Each `estimate` and new study asks
#: again (the notebook API, a test's commands): seconds of CPU each. A user's own model
#: (module:factory, an object) may change between calls, and is measured each time.
_MEASURED: dict[tuple[Any, ...], NumericsAdvice] = {}


def advise(
    problem: Problem,
    lr: float | None = None,
    steps: int = 3,
    data: str | None = None,
    seed: int = 0,
) -> NumericsAdvice:
    """Loss scale, stochastic rounding and partials for `problem`, from a short CPU run.

    The model is built on the CPU with its own initialisation (seeded; the global RNG is left
    as it was). Batches come from `data` ("module:function") or `synthetic_batches`, at most
    16 samples each; the learning rate defaults to `default_lr`.
    """
    if problem.token_inputs or problem.inputs:
        raise UsageError(
            f"numerics: {problem.model} takes token ids or named inputs, and the statistics run "
            "feeds one float image batch so far; tuning searches loss scaling, stochastic "
            "rounding and partials for it instead"
        )
    if lr is not None and not lr > 0:
        raise UsageError(f"--lr must be positive, got {lr}")
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    # the IPU count does not enter the run: one answer for every size `plan` searches
    key = (
        (dataclasses.replace(problem, ipus=1), lr, steps, seed)
        if data is None and ":" not in problem.model
        else None
    )
    if key is not None and key in _MEASURED:
        return copy.deepcopy(_MEASURED[key])  # the caller's to change
    advice = _measure(problem, lr, steps, data, seed)
    if key is not None:
        if len(_MEASURED) >= 64:  # a few models a process: bounded all the same
            _MEASURED.clear()
        _MEASURED[key] = copy.deepcopy(advice)
    return advice


def _measure(
    problem: Problem, lr: float | None, steps: int, data: str | None, seed: int
) -> NumericsAdvice:
    from ..models.zoo import build_model

    batches = load_data(data) if data else synthetic_batches(problem, steps, seed)
    try:
        batch_list = take(capped(batches, STATS_BATCH_CAP), steps)
    except UsageError:
        raise
    except Exception as exc:  # the user's loader failed while iterating
        raise UsageError(f"--data '{data}': reading batches failed: {first_line(exc)}") from None
    if lr is None:
        lr = default_lr(problem.optimizer, problem.global_batch or problem.batch_size)
    # Seeded initialisation and dropout, without touching the caller's random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(problem.model, problem.num_classes, device="cpu")
        stats = collect_gradient_stats(
            model,
            batch_list,
            steps=steps,
            optimizer=problem.optimizer,
            lr=lr,
            target_batch=problem.batch_size,
        )
        partials = partials_advice(model, batch_list[0][0][:PARTIALS_BATCH_CAP])
    return NumericsAdvice(
        loss_scale=recommend_loss_scale(stats),
        stochastic_rounding=stochastic_rounding_advice(stats),
        partials=partials,
        table=loss_scale_table(stats),
        model=problem.model,
        optimizer=problem.optimizer,
        lr=stats.lr,
        steps=stats.steps,
        batch_used=stats.batch_used,
        drift_binades=stats.drift_binades(),
        max_abs_grad=stats.max_abs_grad,
    )
