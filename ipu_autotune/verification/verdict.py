"""The verdict: the tuned run's loss and accuracy at matched samples seen, against the band two
baseline runs (two seeds: initialisation and data order) span.

The curves are compared over the last quarter of the samples both saw (each run's held-out
loss and accuracy interpolated at the first baseline run's checkpoints, then averaged there,
which smooths one checkpoint's noise). The band is the two baselines' values widened on each
side by their distance, and by at least 5 % of the baseline's loss fall (1 point of accuracy):
two seeds underestimate the spread of many.

- "diverged": the tuned loss or a weight became inf/NaN, or its loss ended above where it began
  by more than the band is wide;
- "stalled": its loss fell less than a quarter of what each baseline run's fell (from each run's
  own start: the seeds start at different losses);
- "lags": its loss ends above the band, or its accuracy below it;
- "at parity": in the band or better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise

from ..numerics.fp16 import format_percent
from .curve import RunResult

#: the study user attribute `verify` stores its verdict under (the report draws the curves)
ATTR_VERIFY = "verify"
#: exit code of `verify` when the check fails (anything but "at parity"); 0 at parity
EXIT_FAILED_CHECK = 5
#: the compared window: this last share of the samples every run saw
WINDOW = 0.25
#: the band's least half-width: this share of the baseline's loss fall, and of accuracy
LOSS_FLOOR, ACCURACY_FLOOR = 0.05, 0.01
#: stalled: the tuned loss fell less than this share of the baseline's fall
STALL_SHARE = 0.25


def _at(run: RunResult, samples: float, attr: str) -> float:
    """`attr` of `run`'s curve at `samples`, interpolated linearly between checkpoints."""
    pts = run.points
    for left, right in pairwise(pts):
        if left.samples <= samples <= right.samples:
            t = (samples - left.samples) / (right.samples - left.samples) if right.samples > left.samples else 1.0
            a, b = getattr(left, attr), getattr(right, attr)
            return a + t * (b - a)
    return getattr(pts[-1], attr)


def _window_mean(run: RunResult, grid: list[int], attr: str) -> float:
    return sum(_at(run, s, attr) for s in grid) / len(grid)


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

    @property
    def passed(self) -> bool:
        return self.kind == "at parity"

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else EXIT_FAILED_CHECK

    @property
    def tuned(self) -> RunResult:
        return self.runs[-1]

    def line(self) -> str:
        """The one-line summary for the terminal."""
        t = self.tuned
        lo, hi = self.loss_band
        numerics = (f"FP16 gradients {format_percent(t.underflow_fraction)} underflowed, "
                    f"{format_percent(t.overflow_fraction)} overflowed; " if t.gradient_values else "")
        return (f"verify: {self.kind}: tuned loss {self.tuned_loss:.3g} (accuracy {format_percent(self.tuned_accuracy)}) "
                f"at {self.samples:,} samples, baseline band {lo:.3g}-{hi:.3g} over 2 seeds; {numerics}"
                f"{format_percent(t.lost_update_fraction)} of weight updates lost to rounding. {self.reason}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Verdict:
        d = dict(data)
        d["runs"] = [RunResult.from_dict(r) for r in d.get("runs", [])]
        d["loss_band"], d["accuracy_band"] = tuple(d["loss_band"]), tuple(d["accuracy_band"])
        return cls(**d)


def _band(a: float, b: float, floor: float) -> tuple[float, float]:
    width = max(abs(a - b), floor)
    return min(a, b) - width, max(a, b) + width


def judge(base: RunResult, base_other: RunResult, tuned: RunResult, not_emulated: Sequence[str] = ()) -> Verdict:
    runs = [base, base_other, tuned]
    end = min(r.points[-1].samples for r in runs)
    grid = [p.samples for p in base.points if p.samples >= end * (1 - WINDOW) and p.samples <= end] or [end]
    loss = [_window_mean(r, grid, "eval_loss") for r in runs]
    acc = [_window_mean(r, grid, "eval_accuracy") for r in runs]
    start = base.points[0].eval_loss
    base_fall = start - (loss[0] + loss[1]) / 2
    loss_band = _band(loss[0], loss[1], LOSS_FLOOR * max(base_fall, 0.0))
    acc_band = _band(acc[0], acc[1], ACCURACY_FLOOR)

    def verdict(kind: str, reason: str) -> Verdict:
        return Verdict(kind, reason, end, loss[2], acc[2], loss_band, acc_band, runs, list(not_emulated))

    if any(r.nonfinite_at is not None or not math.isfinite(v) for r, v in zip(runs[:2], loss[:2], strict=True)):
        return verdict("baseline diverged", "the baseline itself did not train: lower --lr")
    if tuned.nonfinite_at is not None:
        return verdict("diverged", f"its loss or weights became inf/NaN after {tuned.nonfinite_at:,} samples")
    tuned_start = tuned.points[0].eval_loss
    if not math.isfinite(loss[2]) or loss[2] > tuned_start + (loss_band[1] - loss_band[0]):
        return verdict("diverged", f"its loss rose from {tuned_start:.3g} to {loss[2]:.3g} "
                                   f"where the baseline's fell to {(loss[0] + loss[1]) / 2:.3g}")
    tuned_fall = tuned_start - loss[2]
    base_falls = [r.points[0].eval_loss - v for r, v in zip(runs[:2], loss[:2], strict=True)]
    if min(base_falls) > 0 and tuned_fall < STALL_SHARE * min(base_falls):
        return verdict("stalled", f"its loss fell {tuned_fall:.3g} where the baseline's fell "
                                  f"{min(base_falls):.3g}-{max(base_falls):.3g}")
    if loss[2] > loss_band[1] or acc[2] < acc_band[0]:
        return verdict("lags", f"outside the baseline's band (loss above {loss_band[1]:.3g} or accuracy "
                               f"below {format_percent(max(acc_band[0], 0.0))})")
    return verdict("at parity", "within the baseline's seed-to-seed band or better")
