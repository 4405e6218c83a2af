"""The verdict: the tuned run's held-out loss and accuracy against the band two baseline runs
(two seeds: initialisation and data order) span, compared like with like.

Two comparisons: at matched samples (each curve interpolated at the first baseline's checkpoints
over the last quarter of the samples every run saw, and averaged there) and at each run's
plateau (the best level its curve holds over three checkpoints in a row in its last half: what
it converges to). A larger global batch that is behind at matched samples but reaches the
baseline's plateau is not "lags".

The band: the two baselines' values widened on each side by the noise, never less than their
distance (the seeds' own spread at the end), each run's checkpoint-to-checkpoint noise, 5 % of
the baseline's loss fall and, for accuracy, one point or two binomial standard errors of the
held-out samples, whichever is wider: two seeds underestimate the spread of many.

- "inconclusive": the baseline did not learn within the budget (its loss became inf/NaN, or
  fell no more than twice the seeds' noise or a twentieth of its start): nothing can be judged;
  the advice names what to change (more --steps, a lower --lr, --num-classes);
- "diverged": the tuned loss or a weight became inf/NaN, or its loss ended above where it began
  by more than the band is wide;
- "stalled": its loss fell (to its plateau) less than a quarter of what each baseline run's fell
  (from each run's own start: the seeds start at different losses);
- "lags": outside the band (loss above, or accuracy below) at matched samples and at its plateau,
  and, for a larger global batch whose loss still falls at the end, at matched updates too;
- "at parity": in the band or better at either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from ..numerics.fp16 import format_percent
from .curve import RunResult

#: the study user attribute `verify` stores its verdict under (the report draws the curves)
ATTR_VERIFY = "verify"
#: exit code of `verify` when the check fails (diverged, stalled, lags); 0 at parity
EXIT_FAILED_CHECK = 5
#: exit code of `verify` when it cannot judge: the baseline did not learn within the budget
EXIT_INCONCLUSIVE = 6
#: the compared window: this last share of the samples every run saw
WINDOW = 0.25
#: the band's least half-width: this share of the baseline's loss fall, and of accuracy
LOSS_FLOOR, ACCURACY_FLOOR = 0.05, 0.01
#: stalled: the tuned loss fell less than this share of the baseline's fall
STALL_SHARE = 0.25
#: inconclusive: the baseline's loss fell no more than this many times the seeds' noise, or no more
#: than this share of where it started (a loss held at chance, the label prior learnt)
LEARNS, LEAST_FALL = 2.0, 0.05
#: a plateau: the best mean of this many checkpoints in a row, in the last half of a run's curve
PLATEAU_POINTS = 3


def _at(run: RunResult, samples: float, attr: str) -> float:
    """`attr` of `run`'s curve at `samples`, interpolated linearly between checkpoints."""
    pts = run.points
    for left, right in pairwise(pts):
        if left.samples <= samples <= right.samples:
            t = (
                (samples - left.samples) / (right.samples - left.samples)
                if right.samples > left.samples
                else 1.0
            )
            a, b = float(getattr(left, attr)), float(getattr(right, attr))
            return a + t * (b - a)
    return float(getattr(pts[-1], attr))


def _window_mean(run: RunResult, grid: list[int] | list[float], attr: str) -> float:
    return sum(_at(run, s, attr) for s in grid) / len(grid)


def _plateau(run: RunResult, attr: str, better: int) -> float:
    """The best mean of PLATEAU_POINTS checkpoints in a row over the last half of the run's own
    curve (better = -1: lowest, for the loss; +1: highest, for accuracy)."""
    pts = [
        float(getattr(p, attr)) for p in run.points[1:] if p.samples >= run.points[-1].samples / 2
    ]
    if not pts:
        return float(getattr(run.points[-1], attr))
    k = min(PLATEAU_POINTS, len(pts))
    means = [sum(pts[i : i + k]) / k for i in range(len(pts) - k + 1)]
    return max(means) if better > 0 else min(means)


def _jitter(run: RunResult, start: float, attr: str) -> float:
    """Checkpoint-to-checkpoint noise of `attr` from `start` samples on: the RMS of second
    differences over sqrt(6), the standard deviation of white noise (a straight trend does not
    move it)."""
    vals = [getattr(p, attr) for p in run.points[1:] if p.samples >= start]
    second = [a - 2 * b + c for a, b, c in zip(vals, vals[1:], vals[2:], strict=False)]
    return math.sqrt(sum(d * d for d in second) / len(second) / 6) if second else 0.0


def _still_falling(run: RunResult) -> bool:
    """Its loss still falls at the end: the last PLATEAU_POINTS checkpoints' mean is below the mean
    of those before them by more than twice the curve's own jitter."""
    vals = [p.eval_loss for p in run.points[1:]]
    k = PLATEAU_POINTS
    if len(vals) < 2 * k:
        return False
    return sum(vals[-2 * k : -k]) / k - sum(vals[-k:]) / k > 2 * _jitter(
        run, run.points[-1].samples / 2, "eval_loss"
    )


def _on_par_at_matched_updates(
    runs: list[RunResult], grid: list[int], loss_floor: float, acc_floor: float
) -> bool:
    """A tuned recipe with a larger global batch, behind at matched samples and still falling: is
    it within the baselines' band after as many updates (the baselines' curves read at the samples
    they had seen after the tuned run's number of updates)?"""
    base, other, tuned = runs
    ratio = (
        (base.samples / base.steps) / (tuned.samples / tuned.steps)
        if base.steps and tuned.steps
        else 1.0
    )
    if ratio >= 1 or not _still_falling(tuned):
        return False
    updates = [s * ratio for s in grid]
    loss = [_window_mean(r, updates, "eval_loss") for r in (base, other)]
    acc = [_window_mean(r, updates, "eval_accuracy") for r in (base, other)]
    t_loss, t_acc = (
        _window_mean(tuned, grid, "eval_loss"),
        _window_mean(tuned, grid, "eval_accuracy"),
    )
    return (
        t_loss <= _band(loss[0], loss[1], loss_floor)[1]
        and t_acc >= _band(acc[0], acc[1], acc_floor)[0]
    )


@dataclass
class Verdict:
    kind: str
    reason: str
    samples: int  # matched samples seen
    tuned_loss: float
    tuned_accuracy: float
    loss_band: tuple[float, float]
    accuracy_band: tuple[float, float]
    runs: list[RunResult] = field(default_factory=list)  # baseline, baseline (second seed), tuned
    not_emulated: list[str] = field(default_factory=list)
    # at each run's plateau: the tuned run's loss and accuracy, and the baselines' band there
    plateau_loss: float | None = None
    plateau_accuracy: float | None = None
    plateau_loss_band: tuple[float, float] | None = None
    plateau_accuracy_band: tuple[float, float] | None = None
    fp32_kept: list[str] = field(default_factory=list)  # what stays FP32, as on the IPU
    warnings: list[str] = field(
        default_factory=list
    )  # about the data (labels that use few classes)

    @property
    def passed(self) -> bool:
        return self.kind == "at parity"

    @property
    def exit_code(self) -> int:
        if self.passed:
            return 0
        return EXIT_INCONCLUSIVE if self.kind == "inconclusive" else EXIT_FAILED_CHECK

    @property
    def tuned(self) -> RunResult:
        return self.runs[-1]

    def line(self) -> str:
        """The one-line summary for the terminal."""
        t = self.tuned
        lo, hi = self.loss_band
        numerics = (
            f"FP16 gradients {format_percent(t.underflow_fraction)} underflowed, "
            f"{format_percent(t.overflow_fraction)} overflowed; "
            if t.gradient_values
            else ""
        )
        lost = (
            f"{format_percent(t.lost_update_fraction)} of FP16 weight updates lost to rounding; "
            if t.updates
            else ""
        )
        plateau = ""
        if self.plateau_loss is not None and self.plateau_loss_band is not None:
            plo, phi = self.plateau_loss_band
            plateau = f"; at its plateau {self.plateau_loss:.3g} against {plo:.3g}-{phi:.3g}"
        return (
            f"verify: {self.kind}: tuned loss {self.tuned_loss:.3g} (accuracy "
            f"{format_percent(self.tuned_accuracy)}) at {self.samples:,} samples, baseline band "
            f"{lo:.3g}-{hi:.3g} over 2 seeds{plateau}; {numerics}{lost}{self.reason}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        d = dict(data)
        d["runs"] = [RunResult.from_dict(r) for r in d.get("runs", [])]
        for key in ("loss_band", "accuracy_band", "plateau_loss_band", "plateau_accuracy_band"):
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        return cls(**d)


def _band(a: float, b: float, floor: float, top: float = math.inf) -> tuple[float, float]:
    """The two baselines' values widened on each side by their distance, and by at least `floor`;
    within [0, top] (a loss and an accuracy are not negative, an accuracy not above 1)."""
    width = max(abs(a - b), floor)
    return max(min(a, b) - width, 0.0), min(max(a, b) + width, top)


def _accuracy_floor(acc: float, runs: Sequence[RunResult]) -> float:
    """One point, or two binomial standard errors of an accuracy measured on held-out samples."""
    n = min((r.eval_samples for r in runs), default=0)
    p = min(max(acc, 0.0), 1.0)
    return max(ACCURACY_FLOOR, 2 * math.sqrt(p * (1 - p) / n)) if n else ACCURACY_FLOOR


def _advice(samples: int, lr: float | None) -> str:
    rate = f" (the baseline's is {lr:g})" if lr else ""
    return (
        f"it does not learn within {samples:,} samples, so the tuned recipe cannot be judged: "
        f"give more --steps, a lower --lr{rate}, or --num-classes to match the labels"
    )


def judge(
    base: RunResult,
    base_other: RunResult,
    tuned: RunResult,
    not_emulated: Sequence[str] = (),
    fp32_kept: Sequence[str] = (),
    lr: float | None = None,
) -> Verdict:
    """The verdict on `tuned` against the baselines `base` and `base_other` (two seeds); `lr`, the
    baseline's learning rate, for the advice when it did not learn."""
    runs = [base, base_other, tuned]
    # the baselines' samples (every run trains on as many); a tuned run stopped early by inf/NaN
    # must not shorten the window in which the baselines are judged to learn
    end = min(r.points[-1].samples for r in runs[:2])
    grid = [
        p.samples for p in base.points if p.samples >= end * (1 - WINDOW) and p.samples <= end
    ] or [end]
    loss = [_window_mean(r, grid, "eval_loss") for r in runs]
    acc = [_window_mean(r, grid, "eval_accuracy") for r in runs]
    plateau = [_plateau(r, "eval_loss", -1) for r in runs]
    plateau_acc = [_plateau(r, "eval_accuracy", +1) for r in runs]
    starts = [r.points[0].eval_loss for r in runs]
    base_falls = [starts[i] - loss[i] for i in (0, 1)]
    finite = all(math.isfinite(v) for v in [*loss[:2], *plateau[:2], *base_falls])
    jitter = [
        max(_jitter(r, end * (1 - WINDOW), attr) for r in runs[:2])
        for attr in ("eval_loss", "eval_accuracy")
    ]
    # the seeds' noise on a fall: the two falls' difference, and each curve's checkpoint jitter
    noise = max(abs(base_falls[0] - base_falls[1]), jitter[0]) if finite else math.inf
    fall = max(min(base_falls), 0.0) if finite else 0.0

    def floor(points: int, share: float, least: float) -> tuple[float, float]:
        """Loss and accuracy floors of a band on means of `points` checkpoints: two standard
        errors of the difference of two such means, at least `share` of the fall and `least` of
        accuracy."""
        spread = 2 * math.sqrt(2 / points)
        return max(share * fall, spread * jitter[0]) if finite else 0.0, max(
            least, spread * jitter[1]
        )

    loss_floor, acc_floor = floor(len(grid), LOSS_FLOOR, _accuracy_floor(min(acc[:2]), runs))
    loss_band, acc_band = (
        _band(loss[0], loss[1], loss_floor),
        _band(acc[0], acc[1], acc_floor, 1.0),
    )
    p_loss_floor, p_acc_floor = floor(
        PLATEAU_POINTS, LOSS_FLOOR, _accuracy_floor(min(plateau_acc[:2]), runs)
    )
    p_loss_band = _band(plateau[0], plateau[1], p_loss_floor)
    p_acc_band = _band(plateau_acc[0], plateau_acc[1], p_acc_floor, 1.0)

    def verdict(kind: str, reason: str) -> Verdict:
        return Verdict(
            kind,
            reason,
            end,
            loss[2],
            acc[2],
            loss_band,
            acc_band,
            runs,
            list(not_emulated),
            plateau[2],
            plateau_acc[2],
            p_loss_band,
            p_acc_band,
            list(fp32_kept),
        )

    if any(r.nonfinite_at is not None for r in runs[:2]) or not finite:
        return verdict(
            "inconclusive",
            f"the baseline itself diverged (its loss or weights became inf/NaN): "
            f"{_advice(end, lr)}",
        )
    if min(base_falls) <= max(LEARNS * noise, LEAST_FALL * min(starts[:2])):
        return verdict(
            "inconclusive",
            f"the baseline's loss fell {min(base_falls):.3g}-{max(base_falls):.3g} from "
            f"{min(starts[:2]):.3g}, within {LEARNS:g}x its seeds' noise ({noise:.3g}) or "
            f"{LEAST_FALL:.0%} of its start: {_advice(end, lr)}",
        )
    if tuned.nonfinite_at is not None:
        return verdict(
            "diverged", f"its loss or weights became inf/NaN after {tuned.nonfinite_at:,} samples"
        )
    if not math.isfinite(loss[2]) or loss[2] > starts[2] + (loss_band[1] - loss_band[0]):
        return verdict(
            "diverged",
            f"its loss rose from {starts[2]:.3g} to {loss[2]:.3g} "
            f"where the baseline's fell to {(loss[0] + loss[1]) / 2:.3g}",
        )
    tuned_fall = starts[2] - min(loss[2], plateau[2])
    if tuned_fall < STALL_SHARE * min(base_falls):
        return verdict(
            "stalled",
            f"its loss fell {tuned_fall:.3g} where the baseline's fell "
            f"{min(base_falls):.3g}-{max(base_falls):.3g}",
        )
    matched_lags = loss[2] > loss_band[1] or acc[2] < acc_band[0]
    plateau_lags = plateau[2] > p_loss_band[1] or plateau_acc[2] < p_acc_band[0]
    if (
        matched_lags
        and plateau_lags
        and _on_par_at_matched_updates(runs, grid, loss_floor, acc_floor)
    ):
        return verdict(
            "at parity",
            "behind at matched samples and still falling (a larger global batch: fewer "
            "updates), within the baseline's band at matched updates; more --steps show "
            "its plateau",
        )
    if matched_lags and plateau_lags:
        return verdict(
            "lags",
            "outside the baseline's band at matched samples and at its plateau (loss above "
            f"{p_loss_band[1]:.3g} or accuracy below {format_percent(max(p_acc_band[0], 0.0))} "
            "there)",
        )
    if matched_lags:
        return verdict(
            "at parity", "behind at matched samples, but its plateau is within the baseline's band"
        )
    return verdict("at parity", "within the baseline's seed-to-seed band or better")
