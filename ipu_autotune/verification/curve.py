"""What one training run records (run.py trains it): loss and accuracy at checkpoints and the
share of values FP16 lost, as plain data, so that reading a stored verdict (the report) needs
no torch."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CurvePoint:
    samples: int
    train_loss: (
        float | None
    )  # mean over the updates since the previous point (None before the first)
    eval_loss: float
    eval_accuracy: float


@dataclass
class RunResult:
    label: str
    seed: int
    recipe: str
    steps: int
    samples: int
    points: list[CurvePoint] = field(default_factory=list)
    gradient_values: int = 0
    underflow: int = 0
    overflow: int = 0
    updates: int = 0
    lost_updates: int = 0
    skipped_updates: int = 0  # automatic loss scaling's overflow steps
    nonfinite_at: int | None = None  # samples seen when the loss or a weight became inf/NaN
    seconds: float = 0.0
    eval_seconds: float = 0.0  # of `seconds`, the held-out evaluations
    eval_samples: int = 0  # the held-out samples each point's loss and accuracy are measured on

    @property
    def underflow_fraction(self) -> float:
        return self.underflow / self.gradient_values if self.gradient_values else 0.0

    @property
    def overflow_fraction(self) -> float:
        return self.overflow / self.gradient_values if self.gradient_values else 0.0

    @property
    def lost_update_fraction(self) -> float:
        return self.lost_updates / self.updates if self.updates else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: inf/NaN (a diverged run's losses) as None."""
        d = asdict(self)
        d["points"] = [
            {k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in p.items()}
            for p in d["points"]
        ]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        d = dict(data)
        d["points"] = [CurvePoint(**p) for p in d.get("points", [])]
        return cls(**d)
