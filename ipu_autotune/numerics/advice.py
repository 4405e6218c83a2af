"""The numerics advice: one record of the three recommendations, how it is measured (`advise`)
and how it changes a config (`NumericsAdvice.apply`)."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UsageError
from ..problem import Config, Problem
from .data import STATS_BATCH_CAP, capped, load_data, synthetic_batches, take
from .fp16 import format_scale
from .loss_scale import LossScaleAdvice, LossScaleRow, loss_scale_table, recommend_loss_scale
from .optimizers import default_lr
from .partials import LayerPartials, PartialsAdvice, partials_advice
from .running import first_line
from .statistics import collect_gradient_stats
from .stochastic_rounding import StochasticRoundingAdvice, stochastic_rounding_advice

#: samples for the partials forward pass
PARTIALS_BATCH_CAP = 8


@dataclass
class NumericsAdvice:
    loss_scale: LossScaleAdvice
    stochastic_rounding: StochasticRoundingAdvice
    partials: PartialsAdvice
    table: list[LossScaleRow]
    model: str = ""
    optimizer: str = ""
    lr: float = 0.0
    steps: int = 0
    batch_used: int = 0
    drift_binades: int = 0
    max_abs_grad: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (fits an Optuna user attribute)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NumericsAdvice:
        d = dict(data)
        p = dict(d.pop("partials"))
        p["layers"] = [LayerPartials(**lp) for lp in p.get("layers", [])]
        p["risky_layers"] = list(p["risky_layers"])
        return cls(
            loss_scale=LossScaleAdvice(**d.pop("loss_scale")),
            stochastic_rounding=StochasticRoundingAdvice(**d.pop("stochastic_rounding")),
            partials=PartialsAdvice(**p),
            table=[LossScaleRow(**row) for row in d.pop("table")],
            **d,
        )

    def apply(self, config: Config) -> Config:
        """`config` with the advice applied where FP16 is used.

        32.32: loss_scaling 1.0, nothing else. FP16 compute: partials and loss scale ("auto"
        only with FP16 weights, as PopTorch requires). FP16 weights: also stochastic rounding.
        """
        if not config.half_compute:
            return config if config.loss_scaling == 1.0 else config.replace(loss_scaling=1.0)
        auto = self.loss_scale.auto and config.half_weights
        changes: dict[str, Any] = {"partials": self.partials.recommend,
                                   "loss_scaling": "auto" if auto else self.loss_scale.scale}
        if config.half_weights:
            changes["stochastic_rounding"] = self.stochastic_rounding.recommend
        return config.replace(**changes)


def summary_lines(advice: NumericsAdvice) -> list[str]:
    """One line per decision, with its reason."""
    ls, sr, pa = advice.loss_scale, advice.stochastic_rounding, advice.partials
    scale = format_scale(ls.scale)
    head = f"loss scaling auto (start {scale})" if ls.auto else f"loss scale {scale}"
    return [
        f"{head}: {ls.reason}",
        f"stochastic rounding {'on' if sr.recommend else 'off'}: {sr.reason}",
        f"partials {pa.recommend}: {pa.reason}",
    ]


#: advice measured in this process, by what it depends on: a torchvision model's (its name has
#: no ':') on synthetic batches is a pure function of them. Each `estimate` and new study asks
#: again (the notebook API, a test's commands): seconds of CPU each. A user's own model
#: (module:factory, an object) may change between calls, and is measured each time.
_MEASURED: dict[tuple, NumericsAdvice] = {}


def advise(problem: Problem, lr: float | None = None, steps: int = 3, data: str | None = None,
           seed: int = 0) -> NumericsAdvice:
    """Loss scale, stochastic rounding and partials for `problem`, from a short CPU run.

    The model is built on the CPU with its own initialisation (seeded; the global RNG is left
    as it was). Batches come from `data` ("module:function") or `synthetic_batches`, at most
    16 samples each; the learning rate defaults to `default_lr`.
    """
    if problem.token_inputs or problem.inputs:
        raise UsageError(f"numerics: {problem.model} takes token ids or named inputs, and the statistics run "
                         "feeds one float image batch so far; tuning searches loss scaling, stochastic rounding "
                         "and partials for it instead")
    if lr is not None and not lr > 0:
        raise UsageError(f"--lr must be positive, got {lr}")
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    key = (problem, lr, steps, seed) if data is None and ":" not in problem.model else None
    if key is not None and key in _MEASURED:
        return copy.deepcopy(_MEASURED[key])  # the caller's to change
    advice = _measure(problem, lr, steps, data, seed)
    if key is not None:
        if len(_MEASURED) >= 64:  # a few models a process: bounded all the same
            _MEASURED.clear()
        _MEASURED[key] = copy.deepcopy(advice)
    return advice


def _measure(problem: Problem, lr: float | None, steps: int, data: str | None, seed: int) -> NumericsAdvice:
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
        stats = collect_gradient_stats(model, batch_list, steps=steps, optimizer=problem.optimizer, lr=lr,
                                       target_batch=problem.batch_size)
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
