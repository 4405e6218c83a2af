"""The estimator's calibrated constants: the numbers no datasheet gives.

Each is a fitted or assumed value, with what it was fitted to. `docs/estimator.md` explains
the fit; `tests/test_calibration.py` checks every published point against them. The
benchmarks perturb them (dataclasses.replace) to play a "hidden IPU" the tuner cannot see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EstimatorConstants:
    # --- memory ---------------------------------------------------------------------------
    #: always-live bytes per IPU independent of the model: control code, host exchange
    #: code, worker stacks; about 27 KB per tile. Set by M22 (a tiny CNN whose FP16/FP32
    #: memory ratio is 0.74: the fixed part is what keeps that ratio above 0.5-0.66).
    code_base_bytes: float = 40e6
    #: always-live bytes per non-view op on an IPU: vertex code and state, exchange code.
    #: Fitted between seed-fp32 (OOM) and seed-fp16 / M1 / M3 (fit).
    code_bytes_per_op: float = 0.30e6
    #: extra code for ops that are recomputed (their forward is laid out twice), per op.
    recompute_code_fraction: float = 0.35
    #: busiest tile / mean tile. OOM is per tile (MPO ch. 6); not published, fitted.
    tile_imbalance: float = 1.15
    #: planner temporaries of the largest conv/matmul, as a multiple of its in+out bytes,
    #: before the availableMemoryProportion bound.
    temporary_plan_factor: float = 2.0
    #: AMP below this adds code and data structures (poplin Convolution.hpp docs).
    amp_code_knee: float = 0.1

    # --- time -----------------------------------------------------------------------------
    #: achieved fraction of peak for conv/matmul at AMP 0.6, by compute mode. fp16.16 is
    #: fitted to T1 (ResNet-50, Bow Pod16, 37,061 img/s); no published point pins the
    #: others, so they are set a little lower (float partials, FP32 vector work).
    matmul_efficiency: dict[str, float] = field(
        default_factory=lambda: {"fp16.16": 0.36, "fp16.32": 0.30, "fp32": 0.30}
    )
    #: fixed cost per op per pass (sync, exchange setup, vertex launch), seconds.
    op_overhead_s: float = 1.0e-6
    #: memory-bound ops move their output this many times (read inputs, write output).
    light_traffic_factor: float = 3.0
    #: AMP at which the conv planner reaches its unconstrained speed; speed falls below it.
    amp_saturation: float = 0.6
    #: how much slower conv/matmul get at AMP 0 than at amp_saturation (fraction of time).
    amp_slowdown: float = 0.5
    #: host round trip per call to the PopTorch model (device iterations amortise it).
    host_call_overhead_s: float = 3.0e-3
    #: pipeline sync and inter-IPU copy setup per pipeline cycle.
    pipeline_cycle_overhead_s: float = 30e-6
    #: one op of the weight update on one parameter tensor (the optimizer's accumulate, updater,
    #: var-update and accumulator-zero ops PopART decomposes each weight's update into, run
    #: once per update in the accumulate outer fragment, not outlined). Fitted to the
    #: workshop's two PopVision traces (seed-trace-ga3, -ga8): ~20 ms per ResNet-101 update.
    update_op_s: float = 13e-6
    #: bandwidth multipliers for the link constants of the target (1.0 = datasheet value).
    link_bandwidth_scale: float = 1.0
    host_bandwidth_scale: float = 1.0

    def scaled(self, **factors: float) -> EstimatorConstants:
        """A copy with some constants multiplied (used to perturb the model)."""
        from dataclasses import replace

        changes: dict[str, Any] = {}
        for name, factor in factors.items():
            value = getattr(self, name)
            if isinstance(value, dict):
                changes[name] = {k: v * factor for k, v in value.items()}
            else:
                changes[name] = value * factor
        return replace(self, **changes)


NOMINAL = EstimatorConstants()
