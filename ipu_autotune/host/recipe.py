"""The training recipe a recommendation changes: the global batch and its learning rate.

The ceiling (Problem.max_global_batch, --max-global-batch, default 2,048, 256 when
fine-tuning an hf: model's task head) is justified in the README ("Training recipe").
When the best config trains at another global batch than the starting point, the learning
rate moves with it: linearly for SGD (Goyal et al., 2017,
"Accurate, Large Minibatch SGD") and by the square root for Adam-family optimizers
(Hoffer et al., 2017; Krizhevsky, 2014), as DeepSpeed's autotuning guide advises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..problem import Problem

import math
from dataclasses import dataclass

LINEAR = ("sgd", "sgd_combined")
#: make_optimizer's base rate, the user's own being unknown: common PyTorch starting points
#: for image models...
IMAGE_LR = {
    "sgd": 0.01,
    "sgd_combined": 0.01,
    "adam": 1e-3,
    "adamw": 1e-3,
    "lamb": 1e-3,
    "rmsprop": 1e-3,
}
#: ...and for transformers the rate their fine-tuning recipes start from, transformers'
#: TrainingArguments.learning_rate default: Adam's 1e-3, scaled up, would diverge BERT.
TRANSFORMER_LR = 5e-5


def base_lr(problem: Problem) -> float:
    return TRANSFORMER_LR if problem.token_inputs else IMAGE_LR[problem.optimizer]


def rule(optimizer: str) -> str:
    return "linear" if optimizer in LINEAR else "square root"


@dataclass(frozen=True)
class LearningRate:
    optimizer: str
    base_lr: float
    base_global_batch: int
    global_batch: int

    @property
    def rule(self) -> str:
        return rule(self.optimizer)

    @property
    def factor(self) -> float:
        ratio = self.global_batch / self.base_global_batch
        return ratio if self.rule == "linear" else math.sqrt(ratio)

    @property
    def lr(self) -> float:
        return float(f"{self.base_lr * self.factor:.3g}")

    def formula(self) -> str:
        ratio = f"{self.global_batch}/{self.base_global_batch}"
        scaled = ratio if self.rule == "linear" else f"sqrt({ratio})"
        return f"{self.base_lr:g} x {scaled} = {self.lr:g}"

    def line(self) -> str:
        return (
            f"learning rate: global batch {self.base_global_batch:,} -> {self.global_batch:,}, "
            f"{self.rule} rule for {self.optimizer}: {self.formula()}"
        )


def scaling(
    optimizer: str, base_lr: float, base_global_batch: int | None, global_batch: int
) -> LearningRate | None:
    """The scaled rate, or None when the global batch did not change (or no base is known)."""
    if not base_global_batch or base_global_batch == global_batch:
        return None
    return LearningRate(optimizer, base_lr, base_global_batch, global_batch)
