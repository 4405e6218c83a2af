"""Gradient statistics: magnitude histograms of gradients, weights and updates from a short
FP32 training run on the CPU. Exponents are read from the bits (exact, no float log)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import UsageError
from ..parsing import OPTIMIZERS
from .data import take
from .fp16 import EXPONENT_BINS, FP16_MANTISSA_BITS, UPDATE_BINS_PER_BINADE, UPDATE_RANGE
from .optimizers import default_lr, update
from .running import MATMUL_LAYERS, cpu_threads, first_line, logits, preserved


@dataclass
class GradientStats:
    """Magnitude histograms of one short FP32 training run.

    Tensors are the parameters' gradients (kind "weight") and the gradients flowing into
    the outputs of Conv/Linear layers (kind "activation": in FP16 training these are FP16
    too). `hist[s, t, i]` counts step s's non-zero finite values of tensor t with
    floor(log2|g|) = i - 127 (bin 0: FP32 subnormals).
    """

    names: list[str]
    kinds: list[str]
    hist: torch.Tensor  # [steps, tensors, 256] int64
    zeros: torch.Tensor  # [steps, tensors]
    nonfinite: torch.Tensor  # [steps, tensors]
    max_abs: torch.Tensor  # [steps, tensors] float64, over finite values
    weight_hist: torch.Tensor  # [params, 256] |w| before the first update, same bins
    # Pairing of each update u with the FP16 copy of its weight w16:
    # log2(|u| / half-ulp(w16)) in 1/64 binades, from -48 to +48 binades (ends clamped).
    update_hist: torch.Tensor  # [steps, 6144]
    update_zeros: torch.Tensor  # [steps] updates exactly zero
    optimizer: str
    lr: float
    batch_used: int
    batch_target: int

    @property
    def steps(self) -> int:
        return int(self.hist.shape[0])

    def total_hist(self) -> torch.Tensor:
        """Non-zero gradient values per exponent bin, over all steps and tensors."""
        return self.hist.sum(dim=(0, 1))

    @property
    def max_abs_grad(self) -> float:
        return float(self.max_abs.max()) if self.max_abs.numel() else 0.0

    @property
    def nonfinite_count(self) -> int:
        return int(self.nonfinite.sum())

    def drift_binades(self) -> int:
        """How far the gradients move across steps, in binades (powers of two).

        The larger of: the range over steps of floor(log2 max|g|), and the range over steps of
        the median non-zero |g|'s exponent. 0 with one step.
        """
        tops, medians = [], []
        for s in range(self.steps):
            top = float(self.max_abs[s].max()) if self.max_abs.shape[1] else 0.0
            if top > 0:
                tops.append(math.floor(math.log2(top)))
            med = _median_bin(self.hist[s].sum(dim=0))
            if med is not None:
                medians.append(med)
        spread = [max(v) - min(v) for v in (tops, medians) if v]
        return max(spread, default=0)


def _median_bin(hist: torch.Tensor) -> int | None:
    total = int(hist.sum())
    if total == 0:
        return None
    cumulative = torch.cumsum(hist, 0)
    return int(torch.searchsorted(cumulative, (total + 1) // 2))


def _exponent_hist(t: torch.Tensor) -> tuple[torch.Tensor, int, int, float]:
    """(counts per FP32 exponent bin of non-zero finite values, zeros, non-finite, max finite |t|).

    Reads the exponent bits directly: exact floor(log2|x|), no float log. Few passes, since
    this runs over every gradient element.
    """
    t = t.detach().to(torch.float32).reshape(-1)
    if t.numel() == 0:
        return torch.zeros(EXPONENT_BINS, dtype=torch.int64), 0, 0, 0.0
    biased = t.view(torch.int32).bitwise_right_shift(23).bitwise_and_(0xFF)
    hist = torch.bincount(biased, minlength=EXPONENT_BINS)
    # Bin 0 holds zeros and FP32 subnormals: count the zeros (a full pass) only when needed.
    zeros = t.numel() - int(torch.count_nonzero(t)) if hist[0] else 0
    hist[0] -= zeros
    nonfinite = int(hist[255])
    hist[255] = 0
    if nonfinite:
        mag = t.abs()
        mag = mag[torch.isfinite(mag)]
        max_abs = float(mag.max()) if mag.numel() else 0.0
    else:
        low, high = torch.aminmax(t)
        max_abs = max(-float(low), float(high))
    return hist, zeros, nonfinite, max_abs


def _update_pairing(w: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Histogram of log2(|u| / half-ulp(fp16(w))), element by element, and the zero updates.

    Round-to-nearest keeps fp16(w) unchanged when |u| < half an ulp, i.e. when the value
    is negative. Below FP16's normal range the ulp is the subnormal step 2^-24 (also for w = 0).
    """
    u = u.detach().to(torch.float32).reshape(-1)
    # FP16 exponent field: floor(log2|w16|) = field - 15; subnormals and 0 (field 0) share
    # the ulp of the smallest normals (field 1). Half an ulp is 2^(exponent - 11).
    field = w.detach().to(torch.float16).reshape(-1).view(torch.int16).bitwise_right_shift(10)
    field = field.bitwise_and_(0x1F).clamp_(min=1)
    ratio = u.abs().log2_()  # zeros become -inf: they land in the lowest bin, taken out below
    ratio.sub_(field).add_(15 + FP16_MANTISSA_BITS + 1)
    ratio.clamp_(-UPDATE_RANGE, UPDATE_RANGE - 1e-3)
    bins = 2 * UPDATE_RANGE * UPDATE_BINS_PER_BINADE
    hist = torch.histc(ratio, bins=bins, min=-UPDATE_RANGE, max=UPDATE_RANGE).to(torch.int64)
    zeros = u.numel() - int(torch.count_nonzero(u)) if hist[0] else 0
    hist[0] -= zeros
    return hist, zeros


class _Accumulator:
    """Per-tensor histograms of one step, keyed by name (a layer called twice adds up)."""

    def __init__(self) -> None:
        self.entries: dict[str, list[Any]] = {}
        self.kinds: dict[str, str] = {}

    def add(self, name: str, kind: str, t: torch.Tensor) -> None:
        hist, zeros, nonfinite, max_abs = _exponent_hist(t)
        if name in self.entries:
            e = self.entries[name]
            e[0] += hist
            e[1] += zeros
            e[2] += nonfinite
            e[3] = max(e[3], max_abs)
        else:
            self.entries[name] = [hist, zeros, nonfinite, max_abs]
            self.kinds[name] = kind


def collect_gradient_stats(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    steps: int = 3,
    *,
    optimizer: str = "sgd",
    lr: float | None = None,
    target_batch: int | None = None,
) -> GradientStats:
    """Run `steps` FP32 training steps on the CPU and histogram gradients, weights and updates.

    The model trains in place between steps (so drift is real training drift) and is put back
    as it was afterwards. `loss_fn(outputs, labels)` defaults to cross-entropy and should be
    mean-reduced. `target_batch` is the real micro-batch when `batches` hold fewer samples:
    activation gradients of a mean-reduced loss carry a 1/batch factor, so they are scaled by
    used/target to stand for it (parameter gradients are means and need no correction).
    `lr` defaults to `default_lr(optimizer, target_batch)`.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if steps < 1:
        raise ValueError("steps must be at least 1")
    loss_fn = loss_fn or F.cross_entropy
    batch_list = take(batches, steps)
    batch_used = int(batch_list[0][0].shape[0])
    target_batch = target_batch or batch_used
    lr = default_lr(optimizer, target_batch) if lr is None else float(lr)
    act_scale = batch_used / target_batch
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    grad_steps: list[_Accumulator] = []
    update_hists: list[torch.Tensor] = []
    update_zeros: list[int] = []
    weight_acc = _Accumulator()
    opt_state: dict[str, dict[str, Any]] = {n: {} for n, _ in params}
    with cpu_threads(), preserved(model):
        model.train()
        for step, (inputs, labels) in enumerate(batch_list, start=1):
            acc = _Accumulator()
            _backward(model, loss_fn, inputs, labels, acc, act_scale)
            upd_hist = torch.zeros(2 * UPDATE_RANGE * UPDATE_BINS_PER_BINADE, dtype=torch.int64)
            upd_zero = 0
            with torch.no_grad():
                for name, p in params:
                    if step == 1:
                        weight_acc.add(name, "weight", p)
                    if p.grad is None:
                        continue
                    acc.add(name, "weight", p.grad)
                    u = update(optimizer, lr, p, p.grad, opt_state[name], step)
                    h, z = _update_pairing(p, u)
                    upd_hist += h
                    upd_zero += z
                    p.add_(u)
                    p.grad = None
            grad_steps.append(acc)
            update_hists.append(upd_hist)
            update_zeros.append(upd_zero)
    return _assemble(
        grad_steps,
        weight_acc,
        [n for n, _ in params],
        update_hists,
        update_zeros,
        optimizer,
        lr,
        batch_used,
        target_batch,
    )


def _backward(
    model: nn.Module,
    loss_fn: Callable[..., torch.Tensor],
    inputs: torch.Tensor,
    labels: torch.Tensor,
    acc: _Accumulator,
    act_scale: float,
) -> None:
    """Forward and backward, recording the gradients that reach Conv/Linear outputs."""

    def on_forward(name: str) -> Callable[[nn.Module, tuple[Any, ...], object], None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: object) -> None:
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(
                    lambda g: acc.add(name, "activation", g * act_scale if act_scale != 1 else g)
                )

        return hook

    handles = [
        m.register_forward_hook(on_forward(f"{n}:output"))
        for n, m in model.named_modules()
        if isinstance(m, MATMUL_LAYERS)
    ]
    try:
        try:
            outputs = logits(model(inputs))
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(
                f"the model failed on inputs of shape {list(inputs.shape)} "
                f"({first_line(exc)}); check --input-shape"
            ) from None
        try:
            loss = loss_fn(outputs.float(), labels)
        except Exception as exc:
            raise UsageError(
                f"the loss failed on outputs {list(outputs.shape)} and labels "
                f"{list(labels.shape)} ({first_line(exc)}); check --num-classes"
            ) from None
        loss.backward()
    finally:
        for h in handles:
            h.remove()


def _assemble(
    grad_steps: list[_Accumulator],
    weight_acc: _Accumulator,
    param_names: list[str],
    update_hists: list[torch.Tensor],
    update_zeros: list[int],
    optimizer: str,
    lr: float,
    batch_used: int,
    target_batch: int,
) -> GradientStats:
    names = [n for n in param_names if any(n in a.entries for a in grad_steps)]
    for a in grad_steps:
        names += [n for n in a.entries if a.kinds[n] == "activation" and n not in names]
    kinds = ["weight" if n in param_names else "activation" for n in names]
    shape = (len(grad_steps), len(names))
    hist = torch.zeros(*shape, EXPONENT_BINS, dtype=torch.int64)
    zeros = torch.zeros(shape, dtype=torch.int64)
    nonfinite = torch.zeros(shape, dtype=torch.int64)
    max_abs = torch.zeros(shape, dtype=torch.float64)
    for s, a in enumerate(grad_steps):
        for t, n in enumerate(names):
            if n in a.entries:
                h, z, nf, m = a.entries[n]
                hist[s, t], zeros[s, t], nonfinite[s, t], max_abs[s, t] = h, z, nf, m
    weight_hist = (
        torch.stack([weight_acc.entries[n][0] for n in param_names])
        if param_names
        else torch.zeros(0, EXPONENT_BINS, dtype=torch.int64)
    )
    return GradientStats(
        names,
        kinds,
        hist,
        zeros,
        nonfinite,
        max_abs,
        weight_hist,
        torch.stack(update_hists),
        torch.tensor(update_zeros, dtype=torch.int64),
        optimizer,
        lr,
        batch_used,
        target_batch,
    )
