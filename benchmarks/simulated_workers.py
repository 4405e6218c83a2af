"""N compile workers on one study, on a simulated clock (for search_efficiency.py --jobs).

As `ipu-autotune tune --jobs N` runs them: every worker asks the study for its next trial
while the others' compiles are still running (constant-liar TPE and the guide, which skips
configurations that are running, keep them apart), and a result is known to the study only
when its compile finishes. A compile takes `common.compile_minutes` of simulated time; a
candidate screened out by the estimator costs none.
"""

from __future__ import annotations

import heapq
from typing import Any

from common import compile_minutes

from ipu_autotune.rules.cross_field import violations


def run_workers(
    runner: Any, oracle: Any, budget: int, max_trials: int, workers: int
) -> dict[str, Any]:
    """Run until `budget` compiles finished; returns each compile (finish minute, throughput
    or None when it did not fit), in finishing order, the guide's chance to fit for each (None
    where the guide did not propose it), and the trial counts."""
    problem, study = runner.problem, runner.study
    clock, seq, launched, trials, guided = 0.0, 0, 0, 0, 0
    running: list[Any] = []
    compiles: list[tuple[float, float | None]] = []
    durations: list[float] = []  # per compile, in finishing order: its simulated minutes
    chances: list[float | None] = []  # per compile, in finishing order: the guide's chance to fit
    stop_at = None  # compile count at which the guide's stopping rule first applied
    while True:
        while len(running) < workers and launched < budget and trials < max_trials:
            runner._enqueue_guided()
            if stop_at is None and runner.guide_stop is not None:
                stop_at = len(
                    compiles
                )  # the rule, as the guide saw it with these compiles finished
            trial = study.ask()
            config, origin = runner.config_for(trial)
            proposed = runner.last_proposal
            chance = (
                proposed.chance if proposed is not None and proposed.config == config else None
            )
            trials += 1
            guided += origin.startswith("guided")
            if violations(problem, config, runner.profile.module_order):
                raise AssertionError(f"the tuner proposed a config the rules reject: {config}")
            before = oracle.compiles
            m = runner.backend.measure(problem, config)
            if oracle.compiles == before:  # screened: recorded from the estimate at once
                runner.record(trial, config, origin, m, 0.0)
                continue
            launched += 1
            seq += 1
            heapq.heappush(
                running,
                (
                    clock + compile_minutes(problem, config),
                    seq,
                    trial,
                    config,
                    origin,
                    m,
                    compile_minutes(problem, config),
                    chance,
                ),
            )
        if not running:
            break
        clock, _, trial, config, origin, m, minutes, chance = heapq.heappop(running)
        durations.append(minutes)
        chances.append(chance)
        rec = runner.record(trial, config, origin, m, 0.0)
        compiles.append((clock, m.throughput if rec.feasible else None))
    return {
        "compiles": compiles,
        "durations": durations,
        "chances": chances,
        "trials": trials,
        "guided": guided,
        "stop_at": stop_at,
    }
