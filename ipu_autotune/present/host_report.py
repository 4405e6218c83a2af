"""Summary lines for the end-to-end view: bottlenecks, the workshop's reference, the rate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..host import pipeline, recipe
from ..problem import Config, Problem

if TYPE_CHECKING:
    from ..measurement import Measurement
    from ..study.records import TrialRecord

#: The hands-on workshop's final configuration, as it measured it (seed-epoch-ga8-di4-8bit-async).
WORKSHOP_FINAL = Config(
    precision="16.16",
    partials="float",
    optimizer_state="half",
    loss_scaling=1000.0,
    ipus_per_replica=2,
    replicas=1,
    splits=("layer3.8",),
    gradient_accumulation=8,
    device_iterations=4,
    eight_bit_io=True,
    loader_mode="async",
    loader_workers=0,
)


def is_workshop_problem(problem: Problem) -> bool:
    """The default run's problem: ResNet-101, micro-batch 64, 64x64 images, on 2+ Mk2 IPUs."""
    return (
        problem.model == "resnet101"
        and problem.batch_size == 64
        and tuple(problem.input_shape) == (3, 64, 64)
        and problem.target == "mk2"
        and problem.ipus >= 2
        and problem.optimizer == "adamw"
        and not problem.global_batch
    )


def workshop_reference(problem: Problem) -> Measurement | None:
    """The estimator's end-to-end Measurement of the workshop's final config, or None."""
    if not is_workshop_problem(problem):
        return None
    from ..backends.estimate import EstimateBackend

    return EstimateBackend().measure(problem, WORKSHOP_FINAL)


def learning_rate(
    problem: Problem, base: Config | None, best: Config
) -> recipe.LearningRate | None:
    base_gb = pipeline.global_batch(problem, base) if base is not None else None
    return recipe.scaling(
        problem.optimizer, recipe.base_lr(problem), base_gb, pipeline.global_batch(problem, best)
    )


def lines(
    problem: Problem,
    base: TrialRecord | None,
    best: TrialRecord,
    reference: Measurement | None = None,
) -> list[str]:
    """'End to end' lines for the tune summary (records: base and best TrialRecords)."""
    out = []
    m = best.measurement
    label = (
        " (estimated)"
        if m.source == "estimate" or m.details.get("throughput_source") == "estimate"
        else ""
    )
    if m.bottleneck:
        n = m.samples_per_call or pipeline.samples_per_call(problem, best.config)
        alone = f", the IPUs alone {m.device_throughput:,.0f}/s" if m.device_throughput else ""
        out.append(
            f"best: bottleneck {pipeline.bottleneck_line(m)}{label}{alone}; {n:,} samples per "
            f"call of {problem.dataset_size:,} per epoch"
        )
        assumed = (
            pipeline.assumptions(problem, best.config) if m.bottleneck == "host input" else []
        )
        if assumed:
            out.append(
                f"the host-input bottleneck rests on: {'; '.join(assumed)}; --data module:fn "
                "measures both on your loader"
            )
    if reference is not None and reference.throughput:
        ratio = f"; best is {m.throughput / reference.throughput:.1f}x it" if m.throughput else ""
        out.append(
            "workshop's final config (16.16, GA 8, DI 4, 8-bit I/O, async loader): "
            f"{reference.throughput:,.0f}/s (estimated), bottleneck "
            f"{pipeline.bottleneck_line(reference)}{ratio}"
        )
    lr = learning_rate(problem, base.config if base is not None else None, best.config)
    if lr is not None:
        out.append(lr.line() + " (make_optimizer in the snippet uses it)")
    return out
