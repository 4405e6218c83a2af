"""Neighbour moves: a knob's single changes, which the guide's climbs try (KnobSpec.moves)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .knob_types import ConfigT, KnobProblem, Moves, Usable


def toggle(name: str) -> Moves:
    def moves(problem: KnobProblem, config: ConfigT, values: list[Any]) -> Iterable[ConfigT]:
        yield config.replace(**{name: not getattr(config, name)})

    return moves


def other_values(name: str) -> Moves:
    def moves(problem: KnobProblem, config: ConfigT, values: list[Any]) -> Iterable[ConfigT]:
        for v in values:
            if v != getattr(config, name):
                yield config.replace(**{name: v})

    return moves


def other_usable_values(name: str, usable: Usable) -> Moves:
    """other_values, less those the problem cannot take (the sampler leaves them out too)."""

    def moves(problem: KnobProblem, config: ConfigT, values: list[Any]) -> Iterable[ConfigT]:
        yield from other_values(name)(problem, config, [v for v in values if v in usable(problem)])

    return moves


def every_value(name: str) -> Moves:
    """Each value of the space, the config's own included (a climb compares it like the others)."""

    def moves(problem: KnobProblem, config: ConfigT, values: list[Any]) -> Iterable[ConfigT]:
        for v in values:
            yield config.replace(**{name: v})

    return moves


def precision_moves(problem: KnobProblem, config: ConfigT, values: list[Any]) -> Iterable[ConfigT]:
    for p in values:
        if p != config.precision:
            yield config.replace(
                precision=p,
                loss_scaling=1.0 if p == "32.32" else 1024.0,
                partials="float",
                stochastic_rounding=p == "16.16",
            )


def partials_moves(problem: KnobProblem, config: ConfigT, values: list[Any]) -> Iterable[ConfigT]:
    if config.half_compute:
        yield config.replace(partials="half" if config.partials == "float" else "float")


def accumulation_moves(
    problem: KnobProblem, config: ConfigT, values: list[Any]
) -> Iterable[ConfigT]:
    if not problem.global_batch:  # a fixed global batch fixes the accumulation
        yield from every_value("gradient_accumulation")(problem, config, values)


def amp_moves(problem: KnobProblem, config: ConfigT, values: list[Any]) -> Iterable[ConfigT]:
    for a in values:
        yield config.replace(available_memory_proportion=(a,) * config.ipus_per_replica)
