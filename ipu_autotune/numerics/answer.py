"""The numerics answer as data: the loss scale, stochastic rounding and partials decisions with
their reasons, as `advise` (advice.py) measures them and a study stores them. No torch: what
reads a stored answer (`show`'s summary, `export`'s notes) does not import it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..problem import Config
from .fp16 import format_scale

#: max|g| x scale x margin <= 65504. 16x = 4 binades: gradients grow during early training and
#: 3 steps at batch <= 16 see fewer samples (so a smaller max) than a real run.
LOSS_SCALE_MARGIN = 16.0


@dataclass(frozen=True)
class LossScaleRow:
    scale: float
    flushed: float  # share of non-zero gradients below 2^-24 after scaling (lost)
    subnormal: float  # share in [2^-24, 2^-14): kept with fewer significant bits
    overflow: bool  # max|g| x scale > 65504


@dataclass(frozen=True)
class LossScaleAdvice:
    scale: float
    auto: bool
    underflow_at_1: float
    underflow_at_scale: float
    overflow_free: bool
    reason: str
    margin: float = LOSS_SCALE_MARGIN


@dataclass(frozen=True)
class LayerPartials:
    name: str
    accumulation: int  # terms summed per output: in_features, or in_channels/groups x kernel
    max_partial_sum: float  # max over outputs of sum|x*w|: bounds every partial sum, any order
    max_output: float
    swamped: float  # share of outputs whose mean term is below half an FP16 ulp of the output


@dataclass(frozen=True)
class PartialsAdvice:
    recommend: str  # "half" | "float"
    risky_layers: list[str]
    reason: str
    layers: list[LayerPartials] = field(default_factory=list)  # the risky ones, and the longest


@dataclass(frozen=True)
class StochasticRoundingAdvice:
    fraction_lost: float
    recommend: bool
    reason: str
    lr: float = 0.0


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
        changes: dict[str, Any] = {
            "partials": self.partials.recommend,
            "loss_scaling": "auto" if auto else self.loss_scale.scale,
        }
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
