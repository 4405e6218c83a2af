"""Error bars: the shipped widths are what tools/error_bars.py computes from the calibration
set, docs/estimator.md's coverage table is what it prints, and every estimate carries them."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from testing import not_none

from ipu_autotune.backends.base import Measurement
from ipu_autotune.backends.estimate import EstimateBackend, error_bars as eb
from ipu_autotune.problem import Config, Problem

ROOT = Path(__file__).resolve().parent.parent
WORKSHOP = Problem("resnet101", 64, input_shape=(3, 64, 64), optimizer="adamw", ipus=2)
#: what the tuner finds for it: one IPU per replica, FP16, offload with RTS, 74% of a tile
FITTING = Config(
    precision="16.16",
    partials="half",
    optimizer_state="half",
    loss_scaling=16.0,
    ipus_per_replica=1,
    replicas=2,
    splits=(),
    recompute="standard",
    available_memory_proportion=(0.6,),
    optimizer_offload=True,
    replicated_tensor_sharding=True,
    gradient_accumulation=16,
    device_iterations=24,
    eight_bit_io=True,
    loader_workers=4,
)


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location(
        "error_bars_tool", ROOT / "tools" / "error_bars.py"
    )
    assert spec is not None and spec.loader is not None  # a .py file that is there
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tool() -> Any:
    return _tool()


@pytest.fixture(scope="module")
def calibration(tool: Any) -> Any:
    return tool.points()


@pytest.mark.slow
def test_the_shipped_widths_are_what_the_tool_computes_from_the_calibration_set(
    tool: Any, calibration: Any
) -> None:
    widths, scales = tool.constants(calibration)
    assert (
        widths.keys() == eb.THROUGHPUT_LOG_WIDTH.keys() and scales.keys() == eb.MEMORY_SCALE.keys()
    )
    for key, w in widths.items():
        assert eb.THROUGHPUT_LOG_WIDTH[key] == pytest.approx(w, abs=1e-4), (
            "run tools/error_bars.py --constants"
        )
    for key, (lo, hi) in scales.items():
        assert eb.MEMORY_SCALE[key] == pytest.approx((lo, hi), abs=1e-4), (
            "run tools/error_bars.py --constants"
        )


def test_the_docs_coverage_table_is_what_the_tool_prints(tool: Any, calibration: Any) -> None:
    docs = (ROOT / "docs" / "estimator.md").read_text()
    assert tool.table(calibration) in docs, (
        "paste `python tools/error_bars.py` into docs/estimator.md"
    )


def test_every_throughput_point_and_memory_verdict_is_checked_and_tuned_points_are_named(
    tool: Any, calibration: Any
) -> None:
    ids = {p.id for p in calibration}
    assert set(tool.TUNED_ON) - {"M22"} <= ids  # M22 is a ratio: no common factor to check
    assert (
        sum(p.kind == "throughput" for p in calibration) == 12
    )  # the two PopVision traces (seed-trace-ga3, -ga8) joined in issue 42
    assert (
        sum(p.kind == "memory" for p in calibration) == 16
    )  # M23: EfficientNet-B0 split inside MBConvs (issue 42)
    rows = tool.coverage_rows(tool.leave_one_out(calibration))
    held_out = [r for r in rows if r[1] == "not tuned on"]
    assert all(0 < total for *_, total in held_out)


def test_conformal_width_needs_enough_points_for_its_coverage() -> None:
    assert eb.conformal_width([0.1] * 8) is None  # ceil(0.9 * 9) = 9 > 8
    assert eb.conformal_width([0.3, -0.1, 0.2, 0.05, -0.4, 0.0, 0.1, 0.15, -0.2]) == pytest.approx(
        0.4
    )
    assert eb.conformal_width([0.01 * i for i in range(19)]) == pytest.approx(
        0.17
    )  # the 18th of 19


def test_memory_band_is_what_the_verdicts_allow() -> None:
    # (the factor on the uncertain part at which the point fills a tile, fits)
    verdicts = [
        (eb.crossing(0.8), True),
        (eb.crossing(1.25), False),
        (eb.crossing(0.5), True),
        (eb.crossing(3.0), False),
    ]
    assert eb.memory_scale(verdicts) == pytest.approx((0.8, 1.25))
    assert eb.memory_scale([(1.25, True)]) is None
    # an exact share lets the uncertain part grow further before a fit would overflow
    assert eb.crossing(0.8, 0.4) == pytest.approx(1.5) and eb.crossing(0.8) == pytest.approx(1.25)
    # an out-of-memory point whose exact bytes alone overflow says nothing about the rest
    assert eb.crossing(3.3, 2.2) == 0.0 and eb.memory_scale([(1.25, True), (0.0, False)]) is None


def test_leave_one_out_marks_a_point_the_others_do_not_cover(tool: Any) -> None:
    P = tool.Point
    pts = [P(f"t{i}", "cnn", "throughput", "device", 0.05 * (-1) ** i) for i in range(9)]
    pts.append(P("outlier", "cnn", "throughput", "device", 0.9))
    # a fitting point estimated above an out-of-memory one: no common factor explains both
    pts += [
        P(name, fam, "memory", fam, used, fits, 0.0, 1 / used)
        for name, fam, used, fits in (
            ("fits-high", "cnn", 1.5, True),
            ("oom", "cnn", 1.2, False),
            ("fits", "cnn", 0.7, True),
            ("other", "transformer", 2.0, False),
        )
    ]
    inside = {c.point.id: c.inside for c in tool.leave_one_out(pts)}
    assert inside["outlier"] is False and inside["t0"] is True
    assert inside["fits-high"] is False and inside["fits"] is True


def _baseline() -> Config:
    """The default run's baseline (FP32, split by block count): 108% of a tile on IPU0."""
    from ipu_autotune.guide.warmstart import naive_baseline
    from ipu_autotune.profiles.trace import profile_for

    return naive_baseline(WORKSHOP, profile_for(WORKSHOP))


def test_every_estimate_carries_error_bars_around_its_figures() -> None:
    backend = EstimateBackend()
    for config in (_baseline(), FITTING):
        m = backend.measure(WORKSHOP, config)
        tiles, required = not_none(m.max_tile_bytes_interval), not_none(m.required_bytes_interval)
        for (lo, hi), tile in zip(tiles, m.max_tile_bytes, strict=True):
            assert lo <= tile <= hi and lo < hi
        for (lo, hi), req in zip(required, m.required_bytes, strict=True):
            assert lo <= req <= hi
        slow, fast = not_none(m.throughput_interval)
        speed = not_none(m.throughput)
        assert slow < speed < fast and math.log(fast / speed) == pytest.approx(
            eb.THROUGHPUT_LOG_WIDTH["all"]
        )
        slow, fast = not_none(m.device_throughput_interval)
        assert slow < not_none(m.device_throughput) < fast
        again = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
        assert (
            again.max_tile_bytes_interval == m.max_tile_bytes_interval
            and again.throughput_interval == m.throughput_interval
        )


def test_the_verdict_says_when_the_memory_bar_straddles_the_tile_limit() -> None:
    from ipu_autotune.commands.estimate import _print_measurement
    from ipu_autotune.options import DEFAULT_FIT_CONFIDENCE

    backend = EstimateBackend()
    baseline, best = backend.measure(WORKSHOP, _baseline()), backend.measure(WORKSHOP, FITTING)
    assert not baseline.feasible and baseline.straddles_tile_limit  # 108% of a tile, bar 95-135%
    assert best.feasible and not best.straddles_tile_limit  # 74%, bar 65-93%
    for m, config, uncertain in ((baseline, _baseline(), True), (best, FITTING, False)):
        out = io.StringIO()
        _print_measurement(
            Console(file=out, width=200), WORKSHOP, config, m, 0.05, DEFAULT_FIT_CONFIDENCE
        )
        verdict = next(line for line in out.getvalue().splitlines() if line.startswith("verdict:"))
        assert ("straddles the tile limit" in verdict) == uncertain
        assert (
            "error bars (estimated): busiest tile IPU0 " in out.getvalue()
            and "(90%)" in out.getvalue()
        )


def test_families_take_their_own_memory_band_on_all_but_the_exact_bytes() -> None:
    from ipu_autotune.backends.estimate.memory import EXACT

    cnn = EstimateBackend().measure(WORKSHOP, _baseline())
    lo, hi = not_none(cnn.max_tile_bytes_interval)[0]
    exact = sum(cnn.breakdown[0][c] for c in EXACT) / 1472  # the baseline has no I/O tiles
    assert 0 < exact < cnn.max_tile_bytes[0]
    rest = cnn.max_tile_bytes[0] - exact
    assert (lo - exact) / rest == pytest.approx(eb.MEMORY_SCALE["cnn"][0], rel=1e-4)
    assert (hi - exact) / rest == pytest.approx(eb.MEMORY_SCALE["cnn"][1], rel=1e-4)
    assert eb.family("hf:bert-base-uncased") == "transformer" and eb.family("resnet50") == "cnn"


def test_a_compiled_verdict_has_no_memory_bar_its_estimated_throughput_keeps_its_bar() -> None:
    from ipu_autotune.backends.base import Backend
    from ipu_autotune.backends.screen import ScreenedBackend

    class Compiled(Backend):
        def measure(self, problem: Any, config: Any) -> Any:
            return Measurement(
                feasible=True,
                source="compile",
                max_tile_bytes=[400_000],
                tile_capacity_bytes=638_976,
            )

    m = ScreenedBackend(Compiled(), EstimateBackend()).measure(WORKSHOP, FITTING)
    estimate = EstimateBackend().measure(WORKSHOP, FITTING)
    assert m.source == "compile" and m.details["throughput_source"] == "estimate"
    assert (
        m.throughput_interval == estimate.throughput_interval and m.max_tile_bytes_interval is None
    )
    assert not m.straddles_tile_limit
