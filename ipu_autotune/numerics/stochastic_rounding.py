"""Stochastic rounding: the share of FP16 weight updates that round-to-nearest would drop."""

from __future__ import annotations

import math

import torch

from .answer import StochasticRoundingAdvice
from .fp16 import UPDATE_BINS_PER_BINADE, UPDATE_RANGE, format_percent
from .statistics import GradientStats

#: recommend SR when more than this share of updates is dropped: those weights stop learning
#: (the loss is systematic, not noise), and SR is done in IPU hardware at almost no cost.
SR_THRESHOLD = 0.01


def lost_update_fraction(stats: GradientStats, lr: float | None = None) -> float:
    """Share of non-zero updates below half an FP16 ulp of their weight, at learning rate `lr`.

    Exact at the collection's lr (element-wise pairing). Every update rule here is
    proportional to lr, so another lr shifts the pairing by log2(lr / collected lr); the bin
    the threshold falls in is split assuming values spread evenly in log within it.
    """
    hist = stats.update_hist.sum(dim=0).to(torch.float64)
    total = float(hist.sum())
    if total == 0:
        return 0.0
    shift = 0.0 if lr is None else math.log2(lr / stats.lr)
    # lost when log2 ratio + shift < 0, i.e. ratio bin position < -shift
    position = (-shift + UPDATE_RANGE) * UPDATE_BINS_PER_BINADE
    position = min(max(position, 0.0), float(hist.numel()))
    whole = math.floor(position)
    lost = float(hist[:whole].sum())
    if whole < hist.numel():
        lost += float(hist[whole]) * (position - whole)
    return lost / total


def stochastic_rounding_advice(
    stats: GradientStats,
    lr: float | None = None,
    optimizer: str | None = None,
    threshold: float = SR_THRESHOLD,
) -> StochasticRoundingAdvice:
    """Recommend stochastic rounding when more than `threshold` of FP16 weight updates would be
    lost.

    `lr` and `optimizer` default to the collection's; the optimizer must match it (the pairing
    comes from that optimizer's updates).
    """
    if (
        optimizer is not None
        and optimizer != stats.optimizer
        and {optimizer, stats.optimizer} != {"sgd", "sgd_combined"}
    ):
        raise ValueError(f"statistics were collected with {stats.optimizer}, not {optimizer}")
    lr = stats.lr if lr is None else float(lr)
    lost = lost_update_fraction(stats, lr)
    recommend = lost > threshold
    what = (
        f"{format_percent(lost)} of FP16 weight updates (lr {lr:g}, {stats.optimizer}) "
        "are below half an ulp"
    )
    if recommend:
        reason = f"{what} and round-to-nearest would drop them"
    else:
        reason = f"only {what} (threshold {format_percent(threshold)})"
    return StochasticRoundingAdvice(lost, recommend, reason, lr)
