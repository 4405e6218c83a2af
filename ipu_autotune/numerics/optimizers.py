"""The optimizers' intended update (not the FP32-rounded difference), with PopTorch's defaults."""

from __future__ import annotations

import math
from typing import Any

import torch


def default_lr(optimizer: str, batch_size: int) -> float:
    """A typical learning rate when none is given.

    SGD: 0.1 x batch / 256 (the ResNet ImageNet recipe with Goyal et al.'s linear scaling).
    Adam, AdamW, LAMB, RMSprop: 1e-3 (Kingma & Ba's default; these normalise the update to
    about lr per element, so batch size does not enter).
    """
    if optimizer in ("sgd", "sgd_combined"):
        return 0.1 * batch_size / 256
    return 1e-3


def update(
    optimizer: str, lr: float, p: torch.Tensor, g: torch.Tensor, state: dict[str, Any], step: int
) -> torch.Tensor:
    """One step's update for p, with PopTorch's defaults (momentum 0.9; betas 0.9/0.999; eps 1e-8;
    weight decay 0.01 for AdamW and LAMB, else 0)."""
    if optimizer in ("sgd", "sgd_combined"):
        v = state.get("v")
        state["v"] = v = g.clone() if v is None else v.mul_(0.9).add_(g)
        return v * -lr
    if optimizer == "rmsprop":
        sq = state.setdefault("sq", torch.zeros_like(p)).mul_(0.99).addcmul_(g, g, value=0.01)
        delta: torch.Tensor = g / (sq.sqrt() + 1e-8) * -lr
        return delta
    m = state.setdefault("m", torch.zeros_like(p)).mul_(0.9).add_(g, alpha=0.1)
    v = state.setdefault("v", torch.zeros_like(p)).mul_(0.999).addcmul_(g, g, value=0.001)
    denom = v.sqrt().div_(math.sqrt(1 - 0.999**step)).add_(1e-8)
    r = torch.div(m, denom, out=denom).mul_(1 / (1 - 0.9**step))
    if optimizer in ("adamw", "lamb"):
        r.add_(p, alpha=0.01)
    if optimizer == "lamb":
        w_norm, r_norm = float(p.norm()), float(r.norm())
        trust = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
        return r * (-lr * trust)
    return r * -lr
