"""Compile time from the store: seconds as a power of the ops on the busiest stage.

On the IPU, Poplar's compile grows with the code it lays out, which follows the ops a
pipeline stage holds (benchmarks/common.compile_minutes assumes the same for its simulated
clock). Per target and SDK, log(seconds) = a + b log(ops on the busiest stage) by least
squares over the records that report both; the residuals' spread says how far a candidate's
compile may be from the fit. Shown by `ipu-autotune calibration`; the guide does not use it
yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: with fewer records than this, the slope is not fitted: compile time taken as the records' median
MIN_RECORDS = 4


@dataclass(frozen=True)
class CompileTime:
    log_a: float
    b: float
    spread: float  # standard deviation of log(seconds) around the fit
    records: int

    def seconds(self, busiest_stage_ops: float) -> float:
        return math.exp(self.log_a + self.b * math.log(max(busiest_stage_ops, 1.0)))


def _points(records: list[dict[str, Any]]) -> list[tuple[float, float]]:
    out = []
    for r in records:
        seconds = (r.get("measured") or {}).get("compile_seconds")
        ops = (r.get("profile") or {}).get("ops_by_stage") or []
        if isinstance(seconds, (int, float)) and seconds > 0 and ops and max(ops) > 0:
            out.append((math.log(max(ops)), math.log(seconds)))
    return out


def fit_compile_time(records: list[dict[str, Any]]) -> CompileTime | None:
    points = _points(records)
    if not points:
        return None
    ys = [y for _, y in points]
    mean_y = sum(ys) / len(ys)
    xs = [x for x, _ in points]
    mean_x = sum(xs) / len(xs)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if len(points) < MIN_RECORDS or sxx < 1e-9:
        b, log_a = 0.0, mean_y
    else:
        b = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
        log_a = mean_y - b * mean_x
    dof = max(len(points) - (2 if b else 1), 1)
    spread = math.sqrt(sum((y - log_a - b * x) ** 2 for x, y in points) / dof)
    return CompileTime(log_a, b, spread, len(points))
