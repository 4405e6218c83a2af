"""The estimator's error bars and their leave-one-out coverage on the calibration set.

    python tools/error_bars.py              # the coverage table of docs/estimator.md
    python tools/error_bars.py --constants  # the widths that
                                            # ipu_autotune/backends/estimate/error_bars.py ships

Every calibration point with a number or a verdict is estimated once; then, for each point,
the interval is rebuilt from the other points only and the point is checked against it.
tests/test_error_bars.py runs the same functions and compares with the module and the docs.
"""

from __future__ import annotations

import math
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # calibration_models (M22's CNN)

from ipu_autotune.backends.estimate import EstimateBackend  # noqa: E402
from ipu_autotune.backends.estimate.error_bars import (  # noqa: E402
    COVERAGE,
    crossing,
    family,
    memory_scales,
    throughput_widths,
)
from ipu_autotune.backends.estimate.memory import EXACT  # noqa: E402
from ipu_autotune.backends.targets import get_target  # noqa: E402
from ipu_autotune.problem import Config, Problem  # noqa: E402

POINTS_FILE = ROOT / "tests" / "calibration" / "points.toml"

#: points a calibrated constant was fitted to (ipu_autotune/backends/estimate/constants.py,
#: ipu_autotune/host/pipeline.py): their residuals are in-sample, so the table marks them
TUNED_ON = {
    "seed-fp32": "code_bytes_per_op",
    "seed-fp16": "code_bytes_per_op",
    "M1": "code_bytes_per_op",
    "M3": "code_bytes_per_op",
    "M5": "code_bytes_per_op",
    "M22": "code_base_bytes",
    "T1": "matmul_efficiency fp16.16",
    "seed-epoch-ga8": "host float_sample_s, call_s",
    "seed-epoch-ga8-di4": "host float_sample_s",
    "seed-epoch-ga8-di4-8bit": "host uint8_sample_s",
    "seed-trace-ga3": "update_op_s",
    "seed-trace-ga8": "update_op_s",
}


@dataclass(frozen=True)
class Point:
    id: str
    family: str
    kind: str  # "memory" (a verdict) or "throughput"
    category: str  # throughput: "device" | "end_to_end"; memory: the family
    value: float  # memory: busiest tile / tile capacity; throughput: log(published / estimated)
    fits: bool | None = None
    #: memory: the busiest tile's exact share (weights, accumulators, optimizer state spread over
    #: its IPU's tiles), and the factor on the uncertain part at which some IPU fills a tile
    exact: float = 0.0
    limit: float = 0.0


def points(path: Path = POINTS_FILE) -> list[Point]:
    """Every calibration point the error bars use, estimated with the shipped constants.
    M22 (a ratio of two estimates) says nothing about a common factor, so it is left out; so is
    a point whose configuration had to be `interpreted` from an ambiguous publication (M24): it
    tests the verdict, but nobody saw that configuration run, so it must not narrow the bars."""
    backend = EstimateBackend()
    out = []
    for pt in tomllib.loads(path.read_text())["point"]:
        if "known_miss" in pt or "interpreted" in pt:
            continue
        problem, config = Problem.from_dict(pt["problem"]), Config.from_dict(pt["config"])
        fam = family(problem.model)
        if "expect" in pt:
            m = backend.measure(problem, config)
            tiles = get_target(problem.target).tiles - config.io_tiles
            shares = [
                (
                    t / m.tile_capacity_bytes,
                    sum(b[c] for c in EXACT) / tiles / m.tile_capacity_bytes,
                )
                for t, b in zip(m.max_tile_bytes, m.breakdown, strict=True)
            ]
            used, exact = max(shares)
            out.append(
                Point(
                    pt["id"],
                    fam,
                    "memory",
                    fam,
                    used,
                    pt["expect"] == "fits",
                    exact,
                    min(crossing(p, e) for p, e in shares),
                )
            )
        elif "throughput" in pt:
            m = backend.measure(problem, config)
            scope = pt["scope"]
            got = (m.device_throughput if scope == "device" else m.throughput) * pt.get(
                "packing_factor", 1.0
            )
            out.append(Point(pt["id"], fam, "throughput", scope, math.log(pt["throughput"] / got)))
    return out


def _throughput_residuals(pts: list[Point]) -> dict[str, Sequence[float]]:
    out: dict[str, list[float]] = {}
    for p in pts:
        if p.kind == "throughput":
            out.setdefault(p.category, []).append(p.value)
    return {category: values for category, values in out.items()}


def _memory_verdicts(pts: list[Point]) -> dict[str, Sequence[tuple[float, bool]]]:
    out: dict[str, list[tuple[float, bool]]] = {}
    for p in pts:
        if p.kind == "memory":
            assert p.fits is not None  # a memory point carries its verdict
            out.setdefault(p.category, []).append((p.limit, p.fits))
    return {category: verdicts for category, verdicts in out.items()}


def constants(pts: list[Point]) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """(throughput log half-widths, memory scale bands) from every point."""
    return throughput_widths(_throughput_residuals(pts)), memory_scales(_memory_verdicts(pts))


@dataclass(frozen=True)
class Check:
    point: Point
    low: float  # the interval rebuilt without the point: throughput as a ratio to the estimate,
    high: float  # memory as busiest-tile fractions
    inside: bool


def leave_one_out(pts: list[Point]) -> list[Check]:
    checks = []
    for p in pts:
        others = [q for q in pts if q is not p]
        widths, scales = constants(others)
        if p.kind == "throughput":
            w = widths.get(p.category, widths["all"])
            checks.append(Check(p, math.exp(-w), math.exp(w), abs(p.value) <= w))
        else:
            lo, hi = scales.get(p.category, scales["all"])
            rest = p.value - p.exact
            # a verdict is inside when the band reaches the side of the tile limit it fell on
            checks.append(
                Check(
                    p,
                    p.exact + rest * lo,
                    p.exact + rest * hi,
                    lo <= p.limit if p.fits else hi > p.limit,
                )
            )
    return checks


def coverage_rows(checks: list[Check]) -> list[tuple[str, str, int, int]]:
    """(quantity, which points, inside, of) for the docs table."""
    rows = []
    for kind, name in (("memory", "memory per IPU (busiest tile)"), ("throughput", "throughput")):
        subsets: tuple[tuple[str, Callable[[Check], bool]], ...] = (
            ("all points", lambda c: True),
            ("not tuned on", lambda c: c.point.id not in TUNED_ON),
        )
        for subset, keep in subsets:
            sel = [c for c in checks if c.point.kind == kind and keep(c)]
            rows.append((name, subset, sum(c.inside for c in sel), len(sel)))
    return rows


def table(pts: list[Point] | None = None) -> str:
    pts = points() if pts is None else pts
    checks = leave_one_out(pts)
    lines = [
        "| quantity | points | inside the interval (leave-one-out) | fraction |",
        "|---|---|---|---|",
    ]
    for name, subset, inside, total in coverage_rows(checks):
        lines.append(f"| {name} | {subset} | {inside} of {total} | {inside / total:.0%} |")
    lines += [
        "",
        "| point | family | kind | estimate vs published | interval without the point | inside | "
        "tuned on |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        p = c.point
        if p.kind == "throughput":
            what = f"published {math.exp(p.value):.2f}x the estimate ({p.category})"
            band = f"{c.low:.2f}-{c.high:.2f}x"
        else:
            what = f"{p.value:.0%} of a tile ({p.exact:.0%} exact), {'fits' if p.fits else 'OOM'}"
            band = f"{c.low:.0%}-{c.high:.0%}"
        lines.append(
            f"| {p.id} | {p.family} | {p.kind} | {what} | {band} | "
            f"{'yes' if c.inside else '**no**'} | {TUNED_ON.get(p.id, '-')} |"
        )
    return "\n".join(lines)


def constants_source(pts: list[Point] | None = None) -> str:
    widths, scales = constants(points() if pts is None else pts)
    w = ", ".join(f'"{k}": {v:.4f}' for k, v in sorted(widths.items()))
    s = ", ".join(f'"{k}": ({lo:.4f}, {hi:.4f})' for k, (lo, hi) in sorted(scales.items()))
    return f"THROUGHPUT_LOG_WIDTH = {{{w}}}\nMEMORY_SCALE = {{{s}}}"


if __name__ == "__main__":
    pts = points()
    if "--constants" in sys.argv[1:]:
        print(constants_source(pts))
    else:
        print(table(pts))
        print(f"\n({COVERAGE:.0%} intervals; {len(pts)} points)")
