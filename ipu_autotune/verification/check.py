"""`verify` from configurations to a verdict: how many samples each run sees, how long it will
take, and the three runs (the baseline at two seeds, the tuned recipe at the first seed: same
initialisation, same data order)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from ..errors import UsageError
from ..numerics.running import cpu_threads
from ..problem import Config, Problem
from .curve import RunResult
from .defaults import DEFAULT_STEPS
from .recipe import Recipe, recipe_for
from .run import Trainer, checkpoint_steps, train
from .samples import Samples
from .verdict import Verdict, judge


@dataclass(frozen=True)
class Plan:
    baseline: Recipe
    tuned: Recipe
    samples: int  # samples each run trains on (matched)

    def steps(self, recipe: Recipe) -> int:
        return max(1, self.samples // recipe.global_batch)

    @property
    def total_samples(self) -> int:
        """What the three runs process together (the progress bar's total)."""
        return (
            2 * self.steps(self.baseline) * self.baseline.global_batch
            + self.steps(self.tuned) * self.tuned.global_batch
        )


def plan(
    problem: Problem,
    baseline: Config,
    tuned: Config,
    steps: int = DEFAULT_STEPS,
    samples: int | None = None,
    lr: float | None = None,
) -> Plan:
    """Each run sees the same samples: `steps` updates of the larger global batch, at most
    `samples`. `lr`: the baseline's learning rate (default: the export's make_optimizer default);
    the tuned recipe's is scaled from it by the export's rule."""
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    if lr is not None and not lr > 0:
        raise UsageError(f"--lr must be positive, got {lr}")
    base = recipe_for(problem, baseline, "baseline", base_lr=lr)
    tuned_recipe = recipe_for(
        problem, tuned, "tuned", base_global_batch=base.global_batch, base_lr=lr
    )
    total = steps * max(base.global_batch, tuned_recipe.global_batch)
    if samples is not None:
        if samples < max(base.global_batch, tuned_recipe.global_batch):
            raise UsageError(
                f"--samples {samples} is less than one update of global batch "
                f"{max(base.global_batch, tuned_recipe.global_batch)}; raise it"
            )
        total = min(total, samples)
    return Plan(base, tuned_recipe, total)


def _timed_run(
    build: Callable[[], nn.Module], the_plan: Plan, recipe: Recipe, samples: Samples
) -> float:
    """Seconds for one run of `recipe`: one update and one held-out evaluation timed after a
    warm-up micro-batch, times the run's updates and evaluations."""
    trainer = Trainer(build(), recipe, 0, RunResult(recipe.label, 0, "", 0, 0))
    batches = samples.batches(0, recipe.micro_batch)
    with cpu_threads():
        trainer.micro_batch(*next(batches))  # warm-up
        start = time.perf_counter()
        trainer.step(batches)
        step = time.perf_counter() - start
        start = time.perf_counter()
        trainer.evaluate(samples)
        evaluation = time.perf_counter() - start
    steps = the_plan.steps(recipe)
    return steps * step + (len(checkpoint_steps(steps)) + 1) * evaluation


def estimate_seconds(build: Callable[[], nn.Module], the_plan: Plan, samples: Samples) -> float:
    """Wall clock for the three runs on this CPU, from one timed update of each recipe."""
    return 2 * _timed_run(build, the_plan, the_plan.baseline, samples) + _timed_run(
        build, the_plan, the_plan.tuned, samples
    )


def run_check(
    build: Callable[[], nn.Module],
    the_plan: Plan,
    samples: Samples,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> Verdict:
    """The baseline at `seed` and `seed + 1`, the tuned recipe at `seed`, and the verdict."""
    p = the_plan
    base = train(build, p.baseline, samples, p.samples, seed=seed, progress=progress)
    other = train(build, p.baseline, samples, p.samples, seed=seed + 1, progress=progress)
    tuned = train(build, p.tuned, samples, p.samples, seed=seed, progress=progress)
    return judge(base, other, tuned, p.tuned.not_emulated(), p.tuned.fp32_kept(), lr=p.baseline.lr)
