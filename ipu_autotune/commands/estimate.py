"""`ipu-autotune estimate`: one configuration measured (estimated, or compiled) and explained."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from ..backends.base import Measurement, format_bytes
from ..errors import UsageError
from ..options import EstimateOptions
from ..options.problem_flags import problem_from_options
from ..present import intervals, ui
from ..problem import Config, Problem, load_config_file
from ..rules.cross_field import EXIT_BREAKS_RECIPE, recipe_violations, validate
from .common import console_for, make_backend, trace, with_host_data

if TYPE_CHECKING:
    from ..numerics.answer import NumericsAdvice

_WORD_KEYS = ("precision", "partials", "optimizer_state", "execution", "recompute")


def _parse_set(items: Iterable[str]) -> dict[str, Any]:
    import tomllib

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: write KEY=VALUE, e.g. --set precision=16.16")
        key, value = key.strip(), value.strip()
        if key in _WORD_KEYS or value == "auto":
            out[key] = value.strip("\"'")  # 16.16 is a precision name here, not a number
            continue
        if key in ("splits", "checkpoints") and not value.startswith("["):
            out[key] = [p for p in value.split(",") if p]
            continue
        if (
            key == "available_memory_proportion"
            and "," in value
            and not value.strip().startswith("[")
        ):
            value = f"[{value}]"
        try:
            out[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = value  # a bare word such as 16.16 or pipelined
    return out


def run(args: EstimateOptions) -> int:
    console = console_for(args)
    problem, config, m, broken = measured(args, console=console)
    code = EXIT_BREAKS_RECIPE if broken else 0
    if args.json:
        out = m.to_dict()
        out["problem"] = problem.to_dict()
        out["config"] = config.to_dict()
        out["rules_broken"] = broken
        print(json.dumps(out, indent=2))
        return code
    _print_measurement(console, problem, config, m, args.headroom, args.fit_confidence)
    for rule in broken:
        console.print(Text.assemble(("breaks a recipe rule: ", "red"), rule))
    return code


def measured(
    args: EstimateOptions, overrides: dict[str, Any] | None = None, console: Console | None = None
) -> tuple[Problem, Config, Measurement, list[str]]:
    """The problem, the configuration (--config, then --set, then `overrides`: the Python API's
    config keys) checked by the rules, its measurement, and the recipe rules it breaks."""
    from ..guide.warmstart import naive_baseline

    console = console or console_for(args)
    file = load_config_file(args.config) if args.config else None
    problem = with_host_data(
        args, problem_from_options(args, file.problem if file else None), console
    )
    profile = trace(problem, console)
    values = (
        file.config.to_dict()
        if file and file.config
        else naive_baseline(problem, profile).to_dict()
    )
    flag = "--set" if overrides is None else "config"
    overrides = {**_parse_set(args.set), **(overrides or {})}
    if "ipus_per_replica" in overrides and "available_memory_proportion" not in overrides:
        values.pop("available_memory_proportion", None)
    values.update(overrides)
    # The file's [config] was checked when it was read: a bad key or value now came from --set.
    config = Config.from_dict(values, flag if overrides else "config")
    where = " with ".join(filter(None, (args.config, flag if overrides else None))) or "config"
    # A recipe rule (global batch ceiling, samples per call, host memory...) does not stop the
    # answer: the user asked whether this configuration fits. The rule is named with its fix.
    validate(problem, config, profile.module_order, where=where, recipe=False)
    broken = list(recipe_violations(problem, config).values())
    # The verdict is the estimate's own, by the tile limit: the search's headroom is the
    # search's, reported on a line of its own (_print_measurement).
    backend = make_backend(args, problem, console, estimate_headroom=0.0)
    return problem, config, backend.measure(problem, config), broken


def _print_measurement(
    console: Console,
    problem: Problem,
    config: Config,
    m: Measurement,
    headroom: float,
    fit_confidence: float,
) -> None:
    from ..guide.suggestions import suggestions

    label = "estimated" if m.source == "estimate" else m.source
    console.print(ui.measurement_table(m, f"{problem.model}: memory per IPU ({label})"))
    verdict = Text(m.verdict() + intervals.fit_share(m), style="green" if m.feasible else "red")
    console.print(Text.assemble("verdict: ", verdict, intervals.verdict_note(m)))
    if intervals.headroom_note(m, headroom):
        console.print(intervals.headroom_note(m, headroom), highlight=False)
    if intervals.line(m):
        console.print(
            intervals.line(m).replace("error bars", f"error bars ({label})", 1), highlight=False
        )
    if m.throughput:
        assert m.step_time_s is not None  # a backend that gives a throughput gives its step time
        console.print(
            f"throughput: {m.throughput:,.0f} samples/s, step {m.step_time_s * 1e3:.1f} ms "
            f"({label})",
            highlight=False,
        )
    if m.bottleneck:
        from ..host.pipeline import bottleneck_line

        device = f"; the IPUs alone {m.device_throughput:,.0f}/s" if m.device_throughput else ""
        console.print(
            f"end to end: bottleneck {bottleneck_line(m)}{device}; {m.samples_per_call:,} samples "
            f"({format_bytes(m.host_bytes_per_call)}) per call ({label})",
            highlight=False,
        )
    worst = m.worst_ipu()
    if worst is not None and m.breakdown:
        bd = m.breakdown[worst]
        top = max(bd, key=bd.__getitem__)
        console.print(f"largest consumer: {top} on IPU{worst} ({format_bytes(bd[top])})")
    if m.source == "estimate":
        from ..backends.estimate import EstimateBackend

        # Always the estimator (never a compile per suggestion), judged as the verdict is.
        numerics = _Numerics(problem, console)
        judge = EstimateBackend(headroom=headroom, fit_confidence=fit_confidence)
        tips = suggestions(problem, config, measure=judge.measure, numerics=numerics)
        if tips:
            console.print(
                "[bold]Suggestions[/] (estimated, each the whole configuration re-estimated):"
            )
            for tip in tips[:5]:
                console.print(ui.indented(tip.text), highlight=False)
        if any(tip.config.precision != config.precision for tip in tips[:5]) and numerics.notes:
            console.print("[bold]Numerics[/] of the FP16 suggestions (as tune sets them):")
            for note in numerics.notes:
                console.print(ui.indented(note), highlight=False)


class _Numerics:
    """A precision suggestion's loss scaling, stochastic rounding and partials: tune's advice
    (commands/common.numerics_advice, seeded as tune seeds it), measured only when a
    suggestion turns FP16 on; where it cannot be measured, `notes` says so."""

    def __init__(self, problem: Problem, console: Console):
        self.problem, self.console = problem, console
        self.notes: list[str] = []
        self.advice: NumericsAdvice | None = None
        self.asked = False

    def __call__(self, config: Config) -> Config:
        from ..numerics.answer import summary_lines
        from ..search.space import SearchSpace
        from ..study.planning import numerics_unmeasured
        from .common import numerics_advice

        if not self.asked:
            self.asked = True
            space = SearchSpace.load(self.problem)
            self.advice = numerics_advice(self.problem, space, None, self.console)
            if self.advice is not None:
                self.notes = summary_lines(
                    self.advice
                )  # from the model's gradients, measured on the CPU
            else:
                why = (
                    numerics_unmeasured(self.problem, space)
                    or "the gradient statistics run failed"
                )
                self.notes = [
                    f"not measured: {why}; these keep loss scaling 1024 and partials float, "
                    "and tune searches all three instead"
                ]
        return self.advice.apply(config) if self.advice is not None else config
