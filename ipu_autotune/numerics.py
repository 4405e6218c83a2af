"""FP16 numerics advice from the model's own gradients: loss scale, stochastic rounding, partials.

A few FP32 training steps on the CPU, with the model's real initialisation, give histograms of
gradient and weight magnitudes over powers of two. From them:

* loss scale: the largest power of two that keeps the largest gradient 16x below FP16's
  maximum (65504), and how many non-zero gradients scale 1 would flush to zero;
* stochastic rounding: the share of weight updates smaller than half an FP16 ulp of their
  weight, which round-to-nearest drops (the weight never moves);
* partials: matmuls/convolutions whose partial sums could leave FP16's range or swamp.

Everything here decides; `numerics_view` formats. Only torch is used (no numpy).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import glob
import importlib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from .errors import UsageError
from .problem import OPTIMIZERS, Config, Problem

# --- FP16 facts -------------------------------------------------------------------------------

FP16_MAX = 65504.0
FP16_MIN_EXP = -24  # smallest subnormal 2^-24; below it a value flushes to zero (or to 2^-24, >=50% off)
FP16_NORMAL_EXP = -14  # smallest normal 2^-14; below it fewer significant bits remain
FP16_MANTISSA_BITS = 10

# --- thresholds, and why --------------------------------------------------------------------

#: max|g| x scale x margin <= 65504. 16x = 4 binades: gradients grow during early training and
#: 3 steps at batch <= 16 see fewer samples (so a smaller max) than a real run.
LOSS_SCALE_MARGIN = 16.0
#: "auto" when max|g| (or the median |g|) moves more than this many binades across the steps:
#: half of the margin would be gone within 3 steps.
DRIFT_BINADES = 2
#: a fixed scale that still flushes more than this share of gradients is not good enough.
UNDERFLOW_TOLERANCE = 0.01
#: recommend SR when more than this share of updates is dropped: those weights stop learning
#: (the loss is systematic, not noise), and SR is done in IPU hardware at almost no cost.
SR_THRESHOLD = 0.01
#: partial sums are bounded by sum|x*w|; flag a layer when the bound passes FP16_MAX / 16
#: (same 16x growth margin as the loss scale).
PARTIALS_RANGE_LIMIT = FP16_MAX / 16
#: flag a layer when more than this share of its outputs would swamp (see partials_advice).
PARTIALS_SWAMP_TOLERANCE = 0.01
#: samples per statistics step; see synthetic_batches.
STATS_BATCH_CAP = 16
#: samples for the partials forward pass
PARTIALS_BATCH_CAP = 8

SCALE_EXPONENTS = tuple(range(25))  # loss scales 2^0 .. 2^24
_BINS = 256  # FP32 biased exponents: bin i holds floor(log2|x|) = i - 127; bin 0 = FP32 subnormals
_UPDATE_BINS_PER_BINADE = 64
_UPDATE_RANGE = 48  # binades either side of half an ulp


# --- gradient statistics -----------------------------------------------------------------------

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
        return torch.zeros(_BINS, dtype=torch.int64), 0, 0, 0.0
    biased = t.view(torch.int32).bitwise_right_shift(23).bitwise_and_(0xFF)
    hist = torch.bincount(biased, minlength=_BINS)
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
    ratio.clamp_(-_UPDATE_RANGE, _UPDATE_RANGE - 1e-3)
    bins = 2 * _UPDATE_RANGE * _UPDATE_BINS_PER_BINADE
    hist = torch.histc(ratio, bins=bins, min=-_UPDATE_RANGE, max=_UPDATE_RANGE).to(torch.int64)
    zeros = u.numel() - int(torch.count_nonzero(u)) if hist[0] else 0
    hist[0] -= zeros
    return hist, zeros


class _Accumulator:
    """Per-tensor histograms of one step, keyed by name (a layer called twice adds up)."""

    def __init__(self) -> None:
        self.entries: dict[str, list] = {}
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


# --- optimizers: the intended update, not the FP32-rounded difference ---------------------------

def default_lr(optimizer: str, batch_size: int) -> float:
    """A typical learning rate when none is given.

    SGD: 0.1 x batch / 256 (the ResNet ImageNet recipe with Goyal et al.'s linear scaling).
    Adam, AdamW, LAMB, RMSprop: 1e-3 (Kingma & Ba's default; these normalise the update to
    about lr per element, so batch size does not enter).
    """
    if optimizer in ("sgd", "sgd_combined"):
        return 0.1 * batch_size / 256
    return 1e-3


def _update(optimizer: str, lr: float, p: torch.Tensor, g: torch.Tensor, state: dict, step: int) -> torch.Tensor:
    """One step's update for p, with PopTorch's defaults (momentum 0.9; betas 0.9/0.999; eps 1e-8;
    weight decay 0.01 for AdamW and LAMB, else 0)."""
    if optimizer in ("sgd", "sgd_combined"):
        v = state.get("v")
        state["v"] = v = g.clone() if v is None else v.mul_(0.9).add_(g)
        return v * -lr
    if optimizer == "rmsprop":
        sq = state.setdefault("sq", torch.zeros_like(p)).mul_(0.99).addcmul_(g, g, value=0.01)
        return g / (sq.sqrt() + 1e-8) * -lr
    m = state.setdefault("m", torch.zeros_like(p)).mul_(0.9).add_(g, alpha=0.1)
    v = state.setdefault("v", torch.zeros_like(p)).mul_(0.999).addcmul_(g, g, value=0.001)
    denom = v.sqrt().div_(math.sqrt(1 - 0.999 ** step)).add_(1e-8)
    r = torch.div(m, denom, out=denom).mul_(1 / (1 - 0.9 ** step))
    if optimizer in ("adamw", "lamb"):
        r.add_(p, alpha=0.01)
    if optimizer == "lamb":
        w_norm, r_norm = float(p.norm()), float(r.norm())
        trust = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
        return r * (-lr * trust)
    return r * -lr


# --- collection --------------------------------------------------------------------------------

def _idle_cores() -> int:
    """Cores this process may use that no other process is running on right now.

    PyTorch's OpenMP threads spin while they wait: two threads on two cores that another
    process also wants run several times slower than one thread.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        with open("/proc/loadavg") as fh:
            running = int(fh.read().split()[3].split("/")[0])  # runnable threads, system-wide
    except (OSError, ValueError, IndexError):
        return cores
    return max(1, min(cores, cores - (running - _own_running_threads())))


def _own_running_threads() -> int:
    """This process's runnable threads (at least this one), so they do not count as others."""
    own = 0
    for stat in glob.glob("/proc/self/task/*/stat"):
        try:
            with open(stat) as fh:
                own += fh.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            pass
    return max(own, 1)


@contextlib.contextmanager
def _cpu_threads() -> Iterator[None]:
    """Use the idle cores for this run, and put PyTorch's setting back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(_idle_cores())
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _preserved(model: nn.Module) -> Iterator[None]:
    """Run on `model` and leave its weights, buffers (BN statistics), mode and grads as they were."""
    state = copy.deepcopy(model.state_dict())
    training = model.training
    grads = {p: p.grad for p in model.parameters()}
    try:
        yield
    finally:
        model.load_state_dict(state)
        model.train(training)
        for p, g in grads.items():
            p.grad = g


def _logits(output: Any) -> torch.Tensor:
    """The main output of models that return extras in training (Inception, GoogLeNet)."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise UsageError(f"the model returned {type(output).__name__}; return the logits tensor")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


_MATMUL_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


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
    batch_list = _take(batches, steps)
    batch_used = int(batch_list[0][0].shape[0])
    target_batch = target_batch or batch_used
    lr = default_lr(optimizer, target_batch) if lr is None else float(lr)
    act_scale = batch_used / target_batch
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    grad_steps: list[_Accumulator] = []
    update_hists, update_zeros = [], []
    weight_acc = _Accumulator()
    opt_state: dict[str, dict] = {n: {} for n, _ in params}
    with _cpu_threads(), _preserved(model):
        model.train()
        for step, (inputs, labels) in enumerate(batch_list, start=1):
            acc = _Accumulator()
            _backward(model, loss_fn, inputs, labels, acc, act_scale)
            upd_hist = torch.zeros(2 * _UPDATE_RANGE * _UPDATE_BINS_PER_BINADE, dtype=torch.int64)
            upd_zero = 0
            with torch.no_grad():
                for name, p in params:
                    if step == 1:
                        weight_acc.add(name, "weight", p)
                    if p.grad is None:
                        continue
                    acc.add(name, "weight", p.grad)
                    u = _update(optimizer, lr, p, p.grad, opt_state[name], step)
                    h, z = _update_pairing(p, u)
                    upd_hist += h
                    upd_zero += z
                    p.add_(u)
                    p.grad = None
            grad_steps.append(acc)
            update_hists.append(upd_hist)
            update_zeros.append(upd_zero)
    return _assemble(grad_steps, weight_acc, [n for n, _ in params], update_hists, update_zeros,
                     optimizer, lr, batch_used, target_batch)


def _take(batches: Iterable, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first `steps` batches, cycling when there are fewer."""
    taken = []
    for item in batches:
        if not (isinstance(item, (tuple, list)) and len(item) == 2
                and all(isinstance(t, torch.Tensor) for t in item)):
            raise UsageError(f"each batch must be an (inputs, labels) pair of tensors, got {type(item).__name__}")
        taken.append((item[0].cpu(), item[1].cpu()))
        if len(taken) == steps:
            break
    if not taken:
        raise UsageError("the data gave no batches")
    return [taken[i % len(taken)] for i in range(steps)]


def _backward(model: nn.Module, loss_fn, inputs, labels, acc: _Accumulator, act_scale: float) -> None:
    """Forward and backward, recording the gradients that reach Conv/Linear outputs."""

    def on_forward(name: str):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(lambda g: acc.add(name, "activation", g * act_scale if act_scale != 1 else g))
        return hook

    handles = [m.register_forward_hook(on_forward(f"{n}:output"))
               for n, m in model.named_modules() if isinstance(m, _MATMUL_LAYERS)]
    try:
        try:
            outputs = _logits(model(inputs))
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"the model failed on inputs of shape {list(inputs.shape)} "
                             f"({_first_line(exc)}); check --input-shape") from None
        try:
            loss = loss_fn(outputs.float(), labels)
        except Exception as exc:
            raise UsageError(f"the loss failed on outputs {list(outputs.shape)} and labels "
                             f"{list(labels.shape)} ({_first_line(exc)}); check --num-classes") from None
        loss.backward()
    finally:
        for h in handles:
            h.remove()


def _assemble(grad_steps, weight_acc, param_names, update_hists, update_zeros,
              optimizer, lr, batch_used, target_batch) -> GradientStats:
    names = [n for n in param_names if any(n in a.entries for a in grad_steps)]
    for a in grad_steps:
        names += [n for n in a.entries if a.kinds[n] == "activation" and n not in names]
    kinds = ["weight" if n in param_names else "activation" for n in names]
    shape = (len(grad_steps), len(names))
    hist = torch.zeros(*shape, _BINS, dtype=torch.int64)
    zeros = torch.zeros(shape, dtype=torch.int64)
    nonfinite = torch.zeros(shape, dtype=torch.int64)
    max_abs = torch.zeros(shape, dtype=torch.float64)
    for s, a in enumerate(grad_steps):
        for t, n in enumerate(names):
            if n in a.entries:
                h, z, nf, m = a.entries[n]
                hist[s, t], zeros[s, t], nonfinite[s, t], max_abs[s, t] = h, z, nf, m
    weight_hist = torch.stack([weight_acc.entries[n][0] for n in param_names]) if param_names else \
        torch.zeros(0, _BINS, dtype=torch.int64)
    return GradientStats(names, kinds, hist, zeros, nonfinite, max_abs, weight_hist,
                         torch.stack(update_hists), torch.tensor(update_zeros, dtype=torch.int64),
                         optimizer, lr, batch_used, target_batch)


def synthetic_batches(problem: Problem, steps: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` batches of standard-normal inputs of the problem's shape and uniform random labels.

    Standard normal is what normalised images look like to the first layer. The batch is
    min(problem.batch_size, 16) to keep the run fast: parameter gradients of a mean-reduced
    loss are averages whose magnitude barely depends on the batch size, and the 1/batch factor
    of activation gradients is corrected in collect_gradient_stats (target_batch).
    """
    gen = torch.Generator().manual_seed(seed)
    batch = min(problem.batch_size, STATS_BATCH_CAP)
    return [(torch.randn(batch, *problem.input_shape, generator=gen),
             torch.randint(0, problem.num_classes, (batch,), generator=gen))
            for _ in range(steps)]


# --- loss scaling ------------------------------------------------------------------------------

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


def _bin_exponents() -> torch.Tensor:
    e = torch.arange(_BINS, dtype=torch.int64) - 127
    e[0] = -127  # FP32 subnormals: below 2^-126, flushed at every scale we consider
    return e


def _scale_exponent(scale: float) -> int:
    mantissa, exp = math.frexp(scale)
    if mantissa != 0.5:
        raise ValueError(f"loss scales must be powers of two, got {scale}")
    return exp - 1


def loss_scale_table(stats: GradientStats, scales: Iterable[float] = tuple(2.0 ** k for k in SCALE_EXPONENTS)
                     ) -> list[LossScaleRow]:
    """What each power-of-two loss scale does to the observed gradients in FP16.

    Exact from the exponent histograms: a gradient g scaled by 2^k lands at floor(log2|g|) + k.
    """
    hist = stats.total_hist()
    total = int(hist.sum())
    exps = _bin_exponents()
    rows = []
    for scale in scales:
        k = _scale_exponent(scale)
        e = exps + k
        flushed = int(hist[e < FP16_MIN_EXP].sum())
        subnormal = int(hist[(e >= FP16_MIN_EXP) & (e < FP16_NORMAL_EXP)].sum())
        rows.append(LossScaleRow(
            scale=float(scale),
            flushed=flushed / total if total else 0.0,
            subnormal=subnormal / total if total else 0.0,
            overflow=stats.max_abs_grad * scale > FP16_MAX,
        ))
    return rows


def recommend_loss_scale(stats: GradientStats, margin: float = LOSS_SCALE_MARGIN) -> LossScaleAdvice:
    """The largest power of two 2^0..2^24 with max|g| x scale x margin <= 65504.

    `auto` (PopTorch's automatic loss scaling) when one fixed scale is a gamble: the gradients
    drift more than DRIFT_BINADES across the steps, no scale keeps the margin, a scale that
    keeps it still flushes more than 1% of the gradients, or FP32 gradients were non-finite.
    """
    if int(stats.total_hist().sum()) == 0:
        return LossScaleAdvice(1.0, False, 0.0, 0.0, True, "no non-zero gradients were observed", margin)
    top = stats.max_abs_grad
    safe = [k for k in SCALE_EXPONENTS if top * 2.0 ** k * margin <= FP16_MAX]
    k = max(safe) if safe else 0
    at_1, at_scale = (row.flushed for row in loss_scale_table(stats, [1.0, 2.0 ** k]))
    overflow_free = top * 2.0 ** k <= FP16_MAX
    drift = stats.drift_binades()
    kept = f"keeps {format_percent(1 - at_scale)} of non-zero gradients representable in FP16 (scale 1 loses {format_percent(at_1)})"
    why_auto = []
    if stats.nonfinite_count:
        why_auto.append(f"{stats.nonfinite_count} FP32 gradients were inf/NaN (is the learning rate too high?)")
    if not safe:
        why_auto.append(f"max |gradient| {top:.3g} leaves less than a {margin:g}x margin even at scale 1")
    if drift > DRIFT_BINADES:
        why_auto.append(f"gradients moved {drift} binades in {stats.steps} steps")
    if safe and at_scale > UNDERFLOW_TOLERANCE:
        why_auto.append(f"a fixed scale with a {margin:g}x margin still loses {format_percent(at_scale)}")
    if why_auto:
        reason = "; ".join(why_auto) + f"; start at {format_scale(2 ** k)}, which {kept}"
    else:
        reason = f"{kept}; no overflow with {margin:g}x margin (max |gradient| {top:.3g})"
    return LossScaleAdvice(float(2 ** k), bool(why_auto), at_1, at_scale, overflow_free, reason, margin)


def format_scale(scale: float) -> str:
    """1024 as 1024; 2^20 as 2^20 rather than 1.04858e+06."""
    mantissa, exp = math.frexp(scale)
    if scale < 1e5 or mantissa != 0.5:
        return f"{scale:g}"
    return f"2^{exp - 1}"


def format_percent(x: float) -> str:
    """Percent with as many decimals as it takes not to round to 0% or 100%."""
    p = 100 * x
    if p in (0, 100):
        return f"{p:.0f}%"
    for digits in (1, 2, 3):
        text = f"{p:.{digits}f}"
        if 0 < float(text) < 100:
            return text + "%"
    return "<0.001%" if p < 50 else ">99.999%"


# --- stochastic rounding -----------------------------------------------------------------------

@dataclass(frozen=True)
class StochasticRoundingAdvice:
    fraction_lost: float
    recommend: bool
    reason: str
    lr: float = 0.0


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
    position = (-shift + _UPDATE_RANGE) * _UPDATE_BINS_PER_BINADE
    position = min(max(position, 0.0), float(hist.numel()))
    whole = math.floor(position)
    lost = float(hist[:whole].sum())
    if whole < hist.numel():
        lost += float(hist[whole]) * (position - whole)
    return lost / total


def stochastic_rounding_advice(stats: GradientStats, lr: float | None = None, optimizer: str | None = None,
                               threshold: float = SR_THRESHOLD) -> StochasticRoundingAdvice:
    """Recommend stochastic rounding when more than `threshold` of FP16 weight updates would be lost.

    `lr` and `optimizer` default to the collection's; the optimizer must match it (the pairing
    comes from that optimizer's updates).
    """
    if optimizer is not None and optimizer != stats.optimizer and {optimizer, stats.optimizer} != {"sgd", "sgd_combined"}:
        raise ValueError(f"statistics were collected with {stats.optimizer}, not {optimizer}")
    lr = stats.lr if lr is None else float(lr)
    lost = lost_update_fraction(stats, lr)
    recommend = lost > threshold
    what = f"{format_percent(lost)} of FP16 weight updates (lr {lr:g}, {stats.optimizer}) are below half an ulp"
    if recommend:
        reason = f"{what} and round-to-nearest would drop them"
    else:
        reason = f"only {what} (threshold {format_percent(threshold)})"
    return StochasticRoundingAdvice(lost, recommend, reason, lr)


# --- partials ----------------------------------------------------------------------------------

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


def _accumulation_length(m: nn.Module) -> int:
    if isinstance(m, nn.Linear):
        return m.in_features
    return (m.in_channels // m.groups) * math.prod(m.kernel_size)


def _abs_sums(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """sum_k |x_k w_k| per output: the same layer on |x| with |w| and no bias."""
    if isinstance(m, nn.Linear):
        return F.linear(x.abs(), m.weight.abs())
    return m._conv_forward(x.abs(), m.weight.abs(), None)


def _without_bias(m: nn.Module, y: torch.Tensor) -> torch.Tensor:
    if m.bias is None:
        return y
    if isinstance(m, nn.Linear):
        return y - m.bias
    return y - m.bias.view(1, -1, *([1] * (y.dim() - 2)))


def _layer_partials(name: str, m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> LayerPartials:
    k = _accumulation_length(m)
    s = _abs_sums(m, x)
    y = _without_bias(m, y).abs()
    # Swamping: a term smaller than half an ulp of the running sum is lost. The mean term is
    # s/k and the running sum ends near |y|, so terms vanish when s/k < |y| * 2^-11 (this
    # needs k > 2048 and sums that do not cancel, e.g. positive inputs into positive weights).
    swamped = (s > 0) & (s / k < y * 2.0 ** -(FP16_MANTISSA_BITS + 1))
    return LayerPartials(name, k, float(s.max()) if s.numel() else 0.0, float(y.max()) if y.numel() else 0.0,
                         float(swamped.float().mean()) if s.numel() else 0.0)


def partials_advice(model: nn.Module, sample_inputs: torch.Tensor, *, range_limit: float = PARTIALS_RANGE_LIMIT,
                    swamp_tolerance: float = PARTIALS_SWAMP_TOLERANCE) -> PartialsAdvice:
    """Recommend "half" partials unless a Linear/Conv layer's partial sums could overflow or swamp in FP16.

    One forward pass (train mode, state restored) with hooks: a layer is risky when
    max sum|x*w| > range_limit (partial sums could pass FP16_MAX / 16), or when more than
    `swamp_tolerance` of its outputs swamp (long accumulations that do not cancel).
    """
    found: list[LayerPartials] = []

    def on_forward(name: str):
        def hook(module, args, output):
            if args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
                found.append(_layer_partials(name, module, args[0].float(), output.float()))
        return hook

    handles = [m.register_forward_hook(on_forward(n))
               for n, m in model.named_modules() if isinstance(m, _MATMUL_LAYERS)]
    try:
        with _cpu_threads(), _preserved(model), torch.no_grad():
            model.train()
            try:
                model(sample_inputs)
            except Exception as exc:
                raise UsageError(f"the model failed on inputs of shape {list(sample_inputs.shape)} "
                                 f"({_first_line(exc)}); check --input-shape") from None
    finally:
        for h in handles:
            h.remove()
    return _partials_verdict(found, range_limit, swamp_tolerance)


def _partials_verdict(found: list[LayerPartials], range_limit: float, swamp_tolerance: float) -> PartialsAdvice:
    layers = _merge(found)
    if not layers:
        return PartialsAdvice("half", [], "no Linear or Conv layers: partials do not matter")
    risky, why = [], []
    for lp in layers:
        if lp.max_partial_sum > range_limit:
            why.append(f"{lp.name} (partial sums up to {lp.max_partial_sum:.3g} > {range_limit:.0f})")
        elif lp.swamped > swamp_tolerance:
            why.append(f"{lp.name} (accumulates {lp.accumulation} terms without cancelling: "
                       f"{format_percent(lp.swamped)} of outputs swamp)")
        else:
            continue
        risky.append(lp)
    if risky:
        shown = "; ".join(why[:3]) + (f"; and {len(why) - 3} more" if len(why) > 3 else "")
        reason = f"{len(risky)} layer{'s' if len(risky) > 1 else ''} risk FP16 partials: {shown}"
        return PartialsAdvice("float", [lp.name for lp in risky], reason, risky)
    longest = max(layers, key=lambda lp: lp.accumulation)
    top = max(layers, key=lambda lp: lp.max_partial_sum)
    reason = (f"no layer at risk: partial sums stay below {top.max_partial_sum:.3g} ({top.name}); "
              f"longest accumulation {longest.accumulation} ({longest.name}) cancels enough not to swamp")
    return PartialsAdvice("half", [], reason, [longest] if longest is top else [longest, top])


def _merge(found: list[LayerPartials]) -> list[LayerPartials]:
    """One entry per layer (a layer called twice keeps its worst figures), in call order."""
    merged: dict[str, LayerPartials] = {}
    for lp in found:
        old = merged.get(lp.name)
        merged[lp.name] = lp if old is None else dataclasses.replace(
            old, max_partial_sum=max(old.max_partial_sum, lp.max_partial_sum),
            max_output=max(old.max_output, lp.max_output), swamped=max(old.swamped, lp.swamped))
    return list(merged.values())


# --- everything together -----------------------------------------------------------------------

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


def load_data(spec: str) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    """Batches from `module:function` (called without arguments)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--data '{spec}': write it as package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--data '{spec}': cannot import {module_name} ({exc}); "
                         "is it installed or on PYTHONPATH?") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"--data '{spec}': {module_name} has no function '{attr}'")
    try:
        batches = fn()
    except Exception as exc:
        raise UsageError(f"--data '{spec}' failed: {_first_line(exc)}") from None
    if not isinstance(batches, Iterable):
        raise UsageError(f"--data '{spec}' returned {type(batches).__name__}, not an iterable of (inputs, labels)")
    return batches


def _capped(batches: Iterable, cap: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for item in batches:
        if isinstance(item, (tuple, list)) and len(item) == 2:
            yield item[0][:cap], item[1][:cap]
        else:
            yield item  # collect_gradient_stats says what is wrong with it


def advise(problem: Problem, lr: float | None = None, steps: int = 3, data: str | None = None,
           seed: int = 0) -> NumericsAdvice:
    """Loss scale, stochastic rounding and partials for `problem`, from a short CPU run.

    The model is built on the CPU with its own initialisation (seeded; the global RNG is left
    as it was). Batches come from `data` ("module:function") or `synthetic_batches`, at most
    16 samples each; the learning rate defaults to `default_lr`.
    """
    from .models.zoo import build_model

    if lr is not None and not lr > 0:
        raise UsageError(f"--lr must be positive, got {lr}")
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    batches = load_data(data) if data else synthetic_batches(problem, steps, seed)
    try:
        batch_list = _take(_capped(batches, STATS_BATCH_CAP), steps)
    except UsageError:
        raise
    except Exception as exc:  # the user's loader failed while iterating
        raise UsageError(f"--data '{data}': reading batches failed: {_first_line(exc)}") from None
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


# --- command line: `ipu-autotune numerics MODEL --batch-size N` ---------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .cli import add_problem_args, positive

    add_problem_args(parser, hardware=False)
    parser.add_argument("--lr", type=positive(float), default=None,
                        help="learning rate (default 0.1 x batch/256 for SGD, 1e-3 for the others)")
    parser.add_argument("--steps", type=positive(int), default=3, help="training steps to measure (default 3)")
    parser.add_argument("--data", metavar="MODULE:FUNCTION",
                        help="function returning (inputs, labels) batches (default: random inputs and labels)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the initialisation and random data")
    parser.add_argument("--json", action="store_true", help="print the advice as one JSON object")


def command(args: argparse.Namespace, console) -> int:
    from .cli import problem_from_args
    from .numerics_view import render

    problem = problem_from_args(args)
    with console.status(f"{args.steps} FP32 training steps of {problem.model} on the CPU…"):
        advice = advise(problem, lr=args.lr, steps=args.steps, data=args.data, seed=args.seed)
    if args.json:
        print(json.dumps(advice.to_dict(), indent=2))
    else:
        console.print(render(advice))
    return 0
