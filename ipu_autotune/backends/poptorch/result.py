"""The child's `result.json` as a Measurement (a pure function, tested without a
subprocess), and a timed run's end-to-end rate with the host pipeline's cost added."""

from __future__ import annotations

from typing import Any

from ...problem import Config, Problem
from ..base import Measurement, failed, format_bytes
from .errors import LOG_MARKER, CaughtError
from .profile import ProfileMemory


def measurement_from_result(
    result: dict[str, Any], details: dict[str, Any], log_text: str = ""
) -> Measurement:
    """The child's verdict as a Measurement (a pure function, tested without a subprocess)."""
    status = result.get("status")
    error = CaughtError.from_dict(result["error"]) if result.get("error") else None
    memory = ProfileMemory.from_dict(result["memory"]) if result.get("memory") else None
    details = dict(details)
    details.update(
        {
            k: result[k]
            for k in (
                "profile_path",
                "compile_seconds",
                "hardware",
                "oom_evidence",
                "profile_error",
                "phase",
                "sdk",
            )
            if result.get(k) is not None
        }
    )
    if error:
        details["error_type"] = error.type or error.cls
    if (
        status == "compile_error"
        and error is not None
        and error.is_poptorch
        and LOG_MARKER in log_text
    ):
        status, details["oom_evidence"] = "oom", "PopTorch log"  # the parent sees all of stderr

    if status == "refused":  # the child's own rules check, before any allocation (child.refusal)
        return failed(
            "invalid", result.get("reason") or "refused by the trial's host checks", **details
        )
    if status == "ok":
        m = _with_memory(Measurement(feasible=True, source="compile", details=details), memory)
        timing = result.get("timing")
        if timing and timing.get("throughput"):
            m.source = "run"
            m.throughput = float(timing["throughput"])
            m.step_time_s = float(timing["step_time_s"])
            details["timing"] = timing
        elif result.get("run_error"):
            details["run_error"] = CaughtError.from_dict(result["run_error"]).summary()
        return m
    if status == "oom":
        m = _with_memory(
            Measurement(feasible=False, source="compile", failure="oom", details=details), memory
        )
        m.reason = _oom_reason(memory, error)
        return m
    if status == "compile_error":
        return failed("compile_error", error.summary() if error else "compile failed", **details)
    # setup_error: before the configuration touched PopTorch it is our problem or the
    # environment's (crash); from annotate on, PopTorch refused the configuration.
    phase = result.get("phase", "setup")
    what = error.summary() if error else "no error recorded"
    if phase in ("annotate", "options"):
        return failed("compile_error", f"PopTorch rejected the {phase} step: {what}", **details)
    return failed("crash", f"trial setup failed: {what} (log: {details.get('log')})", **details)


def add_end_to_end(m: Measurement, problem: Problem, config: Config) -> None:
    """A timed run feeds synthetic data: its speed is the IPUs'. Add the host pipeline's
    (labelled in details: the host part is the model's, not measured)."""
    from ...host import pipeline as host

    assert m.throughput is not None  # called on a timed run
    seconds_per_call = host.samples_per_call(problem, config) / m.throughput
    e2e = host.end_to_end(problem, config, {"device compute": seconds_per_call})
    m.details["host_part"] = f"estimated: {host.host_costs(problem).source}"
    m.device_throughput = m.throughput
    m.throughput = e2e.throughput
    m.samples_per_call = host.samples_per_call(problem, config)
    m.host_bytes_per_call = host.host_bytes_per_call(problem, config)
    m.bottleneck, m.bottleneck_share = e2e.bottleneck, e2e.bottleneck_share


def _with_memory(m: Measurement, memory: ProfileMemory | None) -> Measurement:
    if memory is None:
        return m
    m.required_bytes = list(memory.required_bytes)
    m.capacity_bytes = list(memory.capacity_bytes)
    m.max_tile_bytes = list(memory.max_tile_bytes)
    m.tile_capacity_bytes = memory.tile_capacity_bytes
    m.breakdown = [dict(b) for b in memory.breakdown]
    m.overflow_bytes = memory.total_overflow
    m.details["overflow_per_ipu"] = list(memory.overflow_bytes)
    m.details["overflowing_tiles"] = list(memory.overflowing_tiles)
    return m


def _oom_reason(memory: ProfileMemory | None, error: CaughtError | None) -> str:
    if memory is None or not memory.overflow_bytes:
        return "out of memory (no readable profile.pop to say where)"
    worst = max(range(len(memory.overflow_bytes)), key=lambda i: memory.overflow_bytes[i])
    if memory.overflow_bytes[worst] == 0:
        return "out of memory (PopTorch said so; the profile shows no tile overflow)"
    return (
        f"out of memory: {memory.overflowing_tiles[worst]} tiles of IPU{worst} over by "
        f"{format_bytes(memory.overflow_bytes[worst])} in total (busiest tile "
        f"{format_bytes(memory.max_tile_bytes[worst])} of "
        f"{format_bytes(memory.tile_capacity_bytes)})"
    )
