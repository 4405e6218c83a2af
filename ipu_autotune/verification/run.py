"""One recipe trained for a number of samples on the CPU, with the IPU's numerics emulated as its
configuration sets them, and what it records: loss and accuracy on held-out samples at
checkpoints, and the share of gradient values and weight updates FP16 lost.

Per optimizer step: the recipe's accumulation x replicas micro-batches, each forward and
backward with the loss scale as the backward pass's seed; under FP16 compute every operation's
result, forward (the loss included) and backward (the weight gradients included), is rounded
to FP16 (emulation.py). Gradients are averaged over the micro-batches (FP16 optimizer
state: a running mean in FP16, as PopTorch's Running reduction), divided by the loss scale, and
the optimizer's update (numerics/optimizers.py, PopTorch's defaults) is added to the weights:
FP32 master weights (32.32, 16.32) or FP16 weights (16.16) rounded to nearest or
stochastically. FP16 optimizer state is the first-order state (momentum), as the export sets
accum_type; the second-order state stays FP32.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..numerics.optimizers import update
from ..numerics.running import cpu_threads, logits
from .curve import CurvePoint, RunResult
from .emulation import RoundingCounts, fp16_emulation, stochastic_fp16, to_fp16
from .recipe import ALS_GROWTH_INTERVAL, Recipe
from .samples import Samples

#: loss and accuracy measured this many times along a run (and once before it)
CHECKPOINTS = 20
#: the optimizer state PopTorch keeps in accum_type (FP16 when optimizer_state is half)
FIRST_ORDER_STATE = {"sgd": "v", "sgd_combined": "v", "adam": "m", "adamw": "m", "lamb": "m"}


def evaluate(model: nn.Module, samples: Samples, half_compute: bool) -> tuple[float, float]:
    """Loss and accuracy on the held-out samples, in the run's forward precision.

    Dropout off, but batch norm on the batch's own statistics (running statistics put back
    afterwards): after a few hundred updates the running averages still lag the weights, and by
    more for a recipe with fewer, larger updates, which would read as a worse loss that is not.
    """
    was_training = model.training
    model.eval()
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    kept = [{k: b.clone() for k, b in m.named_buffers(recurse=False)} for m in norms]
    for m in norms:
        m.train()
    loss, correct, n = 0.0, 0, int(samples.eval_inputs.shape[0])
    with torch.no_grad():
        for start in range(0, n, 256):
            x, y = (
                samples.eval_inputs[start : start + 256],
                samples.eval_labels[start : start + 256],
            )
            with fp16_emulation() if half_compute else contextlib.nullcontext():
                out = logits(model(to_fp16(x) if half_compute else x)).float()
            # the held-out loss in FP32: a summed FP16 loss would measure the sum's rounding
            loss += float(F.cross_entropy(out, y, reduction="sum"))
            correct += int((out.argmax(dim=1) == y).sum())
    for m, buffers in zip(norms, kept, strict=True):
        for k, b in buffers.items():
            getattr(m, k).copy_(b)
    model.train(was_training)
    return loss / n, correct / n


class Trainer:
    """One recipe's weights, optimizer state, loss scale and FP16 counts, one update at a time."""

    def __init__(self, model: nn.Module, recipe: Recipe, seed: int, result: RunResult):
        self.model, self.recipe, self.result = model, recipe, result
        self.params = [p for p in model.parameters() if p.requires_grad]
        if recipe.half_weights:
            with torch.no_grad():
                for p in self.params:
                    p.copy_(to_fp16(p))  # model.half(): the weights are FP16 from the start
        # 16.32: FP32 master weights, an FP16 copy computes; otherwise the parameters are
        # the weights
        self.master = (
            [p.detach().clone() for p in self.params]
            if recipe.half_compute and not recipe.half_weights
            else [p.data for p in self.params]
        )
        self.state: list[dict[str, Any]] = [{} for _ in self.params]
        self.counts = RoundingCounts()
        self.rounding = torch.Generator().manual_seed(seed)
        self.scale = recipe.loss_scale
        self.clean_updates = 0
        self.applied = 0

    def micro_batch(self, x: torch.Tensor, y: torch.Tensor) -> float:
        if not self.recipe.half_compute:
            loss = F.cross_entropy(logits(self.model(x)).float(), y)
            loss.backward(torch.full_like(loss, self.scale))
            return float(loss.detach())
        with fp16_emulation(self.counts) as mode:  # the loss too: in FP16, as the model's last ops
            loss = F.cross_entropy(logits(self.model(to_fp16(x))), y)
            mode.counting = True  # the gradients: what the loss scale must keep in range
            loss.backward(
                torch.full_like(loss, self.scale)
            )  # PopART seeds the backward with the scale
            mode.counting = False
        return float(loss.detach())

    def gradients(
        self, batches: Iterator[tuple[torch.Tensor, torch.Tensor]]
    ) -> tuple[list[torch.Tensor | None], float]:
        """The update's gradients (still loss-scaled) and its mean loss."""
        r = self.recipe
        count = r.accumulation * r.replicas
        acc: list[torch.Tensor | None] = [None] * len(self.params)
        losses = []
        for i in range(count):
            losses.append(self.micro_batch(*next(batches)))
            for j, p in enumerate(self.params):
                g, p.grad = p.grad, None
                if g is None:
                    continue
                if r.half_compute:  # FP16 already (the emulation counted its rounding); kept so
                    g = to_fp16(g)
                before = acc[j]
                if r.half_state:  # PopTorch's Running mean: FP16 accumulators stay in range
                    acc[j] = (
                        g.clone() if before is None else to_fp16(before + (g - before) / (i + 1))
                    )
                else:
                    acc[j] = g / count if before is None else before + g / count
        return acc, sum(losses) / len(losses)

    def sync(self) -> None:
        """16.32: the FP16 copy the model computes with, from the FP32 master weights."""
        if self.recipe.half_compute and not self.recipe.half_weights:
            with torch.no_grad():
                for p, m in zip(self.params, self.master, strict=True):
                    p.copy_(to_fp16(m))

    def evaluate(self, samples: Samples) -> tuple[float, float]:
        start = time.perf_counter()
        self.sync()
        out = evaluate(self.model, samples, self.recipe.half_compute)
        self.result.eval_seconds += time.perf_counter() - start
        return out

    def step(self, batches: Iterator[tuple[torch.Tensor, torch.Tensor]]) -> float:
        r = self.recipe
        self.sync()
        grads, loss = self.gradients(batches)
        with torch.no_grad():
            unscaled = [None if g is None else g / self.scale for g in grads]
            if r.auto_loss_scale and any(
                g is not None and not torch.isfinite(g).all() for g in unscaled
            ):
                self.scale /= 2
                self.clean_updates = 0
                self.result.skipped_updates += 1
                return loss
            self.applied += 1
            for j, (m, g) in enumerate(zip(self.master, unscaled, strict=True)):
                if g is not None:
                    self.apply(j, m, g)
        self.clean_updates += 1
        if r.auto_loss_scale and self.clean_updates % ALS_GROWTH_INTERVAL == 0:
            self.scale *= 2
        return loss

    def apply(self, j: int, weight: torch.Tensor, grad: torch.Tensor) -> None:
        r = self.recipe
        u = update(r.optimizer, r.lr, weight, grad, self.state[j], self.applied)
        key = FIRST_ORDER_STATE.get(r.optimizer)
        if r.half_state and key in self.state[j]:
            self.state[j][key].copy_(to_fp16(self.state[j][key]))
        new = weight + u
        if r.half_weights:
            new = stochastic_fp16(new, self.rounding) if r.stochastic_rounding else to_fp16(new)
        if (
            r.half_weights
        ):  # FP16 weights: an update below half an ulp is lost (FP32's loss is not counted)
            moved = u != 0
            self.result.updates += int(moved.sum())
            self.result.lost_updates += int((moved & (new == weight)).sum())
        weight.copy_(new)


def checkpoint_steps(steps: int, checkpoints: int = CHECKPOINTS) -> list[int]:
    """The updates after which the held-out samples are evaluated (evenly spread, last included)"""
    return sorted({max(1, round(k * steps / checkpoints)) for k in range(1, checkpoints + 1)})


def train(
    build: Callable[[], nn.Module],
    recipe: Recipe,
    samples: Samples,
    total_samples: int,
    *,
    seed: int,
    checkpoints: int = CHECKPOINTS,
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """`recipe` trained on `total_samples` samples (whole updates, at least one) from `samples`
    in the order `seed` draws; the model built after seeding with `seed`. The caller's RNG is
    left as it was."""
    steps = max(1, total_samples // recipe.global_batch)
    result = RunResult(
        recipe.label,
        seed,
        recipe.describe(),
        steps,
        steps * recipe.global_batch,
        eval_samples=int(samples.eval_inputs.shape[0]),
    )
    marks = checkpoint_steps(steps, checkpoints)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]), cpu_threads():
        torch.manual_seed(seed)
        model = build()
        model.train()
        trainer = Trainer(model, recipe, seed, result)
        result.points.append(CurvePoint(0, None, *trainer.evaluate(samples)))
        batches = samples.batches(seed, recipe.micro_batch)
        losses: list[float] = []
        for step in range(1, steps + 1):
            losses.append(trainer.step(batches))
            seen = step * recipe.global_batch
            finite = math.isfinite(losses[-1]) and all(
                torch.isfinite(m).all() for m in trainer.master
            )
            if step in marks or not finite:
                result.points.append(
                    CurvePoint(seen, sum(losses) / len(losses), *trainer.evaluate(samples))
                )
                losses = []
            if progress is not None:
                progress(recipe.global_batch)
            if not finite:
                result.nonfinite_at = seen
                break
    c = trainer.counts
    result.gradient_values, result.underflow, result.overflow = (
        round(v) for v in (c.nonzero, c.underflow, c.overflow)
    )
    result.seconds = time.perf_counter() - start
    return result
