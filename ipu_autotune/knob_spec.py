"""The knob spec: one entry per knob, the table every layer reads.

An entry says what a knob is (its kind and allowed values), when it applies (target,
optimizer, model inputs, IPU layout), how a trial line writes it and where, the Optuna
parameters that replay it, its neighbour moves for the guide's climbs, its refusal (the
rule) and its ipu_config.json key. Parsing, the search space, the rules, the warm starts,
the trial line and the exports read the table; the estimator asks it whether a knob
applies. The table's order is the order the guide tries single changes.

When a knob applies and what it refuses are knob_conditions.py's; its single changes,
knob_moves.py's; what the table reads of a Problem and a Config, knob_types.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# guide/nofit.py reads has_optimizer_state and offload_applies here (re-exported: `X as X`)
from .knob_conditions import (
    has_optimizer_state as has_optimizer_state,
    input_embedding_factors,
    input_embedding_refusal,
    offload_applies as offload_applies,
    offload_refusal,
    projection_factors,
    projection_refusal,
    sharding_applies,
    takes_images,
)
from .knob_moves import (
    accumulation_moves,
    amp_moves,
    every_value,
    other_usable_values,
    other_values,
    partials_moves,
    precision_moves,
    toggle,
)
from .knob_types import Applies, KnobConfig, KnobProblem, Moves, Usable

# The allowed values of the word-valued knobs.
PRECISIONS = ("32.32", "16.32", "16.16")
PARTIALS = ("float", "half")
EXECUTIONS = ("pipelined", "sharded")
RECOMPUTE_MODES = ("default", "none", "standard", "norm_only", "pipeline", "all")
STATE_DTYPES = ("float", "half")
LOADER_MODES = ("sync", "async")  # poptorch.DataLoaderMode.Sync / .Async


@dataclass(frozen=True)
class KnobSpec:
    name: str
    kind: str  # "bool", "int", "word", "number" or "paths"; how files and spaces check it
    words: tuple[str, ...] = ()  # the allowed values of a "word" knob
    least: int = 0  # the smallest whole number an "int" knob takes
    optional: bool = False  # None is a value (micro_batch: the problem's)
    field: bool = True  # a Config field (checkpoint_every is a space knob only)
    in_space: bool = True  # set in the space files (checkpoints come from checkpoint_every)
    space_default: Any = None  # the space's value when no space file sets it (None: a file must)
    applies: Applies | None = None  # None: always
    # Asked on its own, after every other knob, from the space's values it can take here
    # (`usable`); the knobs the others depend on are asked in order by SearchSpace.sample.
    sampled: bool = False
    usable: Usable | None = None
    abbrev: Callable[[Any], str] | None = None  # how a trial line writes it
    line_rank: int = 99  # its place in a trial line (lower first)
    replay: Callable[[KnobConfig], dict[str, Any]] | None = (
        None  # the Optuna parameters that replay it
    )
    moves: Moves | None = None  # single changes
    refusal: Callable[[KnobProblem, KnobConfig], str | None] | None = (
        None  # (problem, config) -> the rule's message, or None
    )
    # The IPUConfig field that carries it when export/ipu_config.py reads it from here (the
    # serialisation factor, which two knobs share); the others are written there by name.
    ipu_config_key: str | None = None
    omit_at_default: bool = False  # left out of a Config's dict at its default (older records)
    # Whether it changes what the IPUs' tiles hold: a host-side knob or a numeric mode does
    # not, so the guide carries a compile's memory error across it in full (guide/corrected.py).
    tile_memory: bool = True

    def applies_to(self, problem: KnobProblem, layout: KnobConfig | None) -> bool:
        return self.applies is None or self.applies(problem, layout)


def _bool_abbrev(on: str) -> Callable[[bool], str]:
    return lambda v: on if v else f"no-{on}"


SPEC: tuple[KnobSpec, ...] = (
    KnobSpec(
        "precision", "word", PRECISIONS, abbrev=lambda v: v, line_rank=3, moves=precision_moves
    ),
    KnobSpec(
        "partials",
        "word",
        PARTIALS,
        abbrev=lambda v: f"partials:{v}",
        line_rank=19,
        moves=partials_moves,
    ),
    KnobSpec(
        "stochastic_rounding",
        "bool",
        abbrev=lambda v: "sr" if v else "no-sr",
        line_rank=21,
        tile_memory=False,
    ),
    KnobSpec(
        "loss_scaling",
        "number",
        abbrev=lambda v: "ls:auto" if v == "auto" else f"ls{v:g}",
        line_rank=20,
        tile_memory=False,
        replay=lambda c: {
            "loss_scaling": c.loss_scaling,
            "loss_scaling_fp32_weights": c.loss_scaling,
        },
    ),
    KnobSpec(
        "optimizer_state",
        "word",
        STATE_DTYPES,
        applies=lambda p, layout: has_optimizer_state(p),
        abbrev=lambda v: f"state:{v}",
        line_rank=12,
        moves=other_values("optimizer_state"),
    ),
    KnobSpec(
        "execution",
        "word",
        EXECUTIONS,
        line_rank=2,
        abbrev=lambda v: "pipe" if v == "pipelined" else "shard" if v == "sharded" else v,
    ),
    KnobSpec(
        "recompute",
        "word",
        RECOMPUTE_MODES,
        abbrev=lambda v: f"rc:{v}",
        line_rank=7,
        replay=lambda c: {"recompute": c.recompute, "recompute_pipelined": c.recompute},
    ),
    KnobSpec("checkpoint_every", "int", field=False),
    KnobSpec(
        "checkpoints", "paths", in_space=False, abbrev=lambda v: f"{len(v)}ckpt", line_rank=8
    ),
    KnobSpec(
        "available_memory_proportion",
        "number",
        line_rank=9,
        abbrev=lambda v: "amp" + "/".join(f"{a:g}" for a in v),
        moves=amp_moves,
        replay=lambda c: {
            f"available_memory_proportion_ipu{i}": a
            for i, a in enumerate(c.available_memory_proportion)
        },
    ),
    KnobSpec(
        "optimizer_offload",
        "bool",
        applies=offload_applies,
        abbrev=_bool_abbrev("offload"),
        line_rank=10,
        moves=toggle("optimizer_offload"),
        refusal=offload_refusal,
    ),
    KnobSpec(
        "replicated_tensor_sharding",
        "bool",
        applies=sharding_applies,
        abbrev=_bool_abbrev("rts"),
        line_rank=11,
        moves=toggle("replicated_tensor_sharding"),
    ),
    KnobSpec(
        "gradient_accumulation",
        "int",
        least=1,
        abbrev=lambda v: f"ga{v}",
        line_rank=4,
        moves=accumulation_moves,
    ),
    KnobSpec(
        "device_iterations",
        "int",
        least=1,
        abbrev=lambda v: f"di{v}",
        line_rank=5,
        moves=every_value("device_iterations"),
        tile_memory=False,
    ),  # the host's buffers grow
    KnobSpec(
        "eight_bit_io",
        "bool",
        applies=lambda p, layout: takes_images(p),
        abbrev=_bool_abbrev("8bit"),
        line_rank=13,
        moves=toggle("eight_bit_io"),
    ),
    KnobSpec("io_tiles", "int", abbrev=lambda v: f"io{v}", line_rank=18),
    KnobSpec(
        "loader_mode",
        "word",
        LOADER_MODES,
        abbrev=lambda v: v,
        line_rank=14,
        moves=other_values("loader_mode"),
        tile_memory=False,
    ),
    KnobSpec(
        "loader_workers",
        "int",
        abbrev=lambda v: f"w{v}",
        line_rank=15,
        moves=other_values("loader_workers"),
        tile_memory=False,
    ),
    KnobSpec(
        "micro_batch",
        "int",
        least=1,
        optional=True,
        abbrev=lambda v: f"mb{v}" if v else "mb:problem",
        line_rank=16,
    ),
    # The vocabulary projection as this many serialised matmuls (export/serialization.py).
    KnobSpec(
        "embedding_serialization",
        "int",
        least=1,
        applies=lambda p, layout: projection_factors(p) != (1,),
        abbrev=lambda v: f"vocab/{v}",
        line_rank=22,
        moves=other_usable_values("embedding_serialization", projection_factors),
        refusal=projection_refusal,
        ipu_config_key="embedding_serialization_factor",
        omit_at_default=True,
        sampled=True,
        usable=projection_factors,
        space_default=1,
    ),
    # The token embedding as this many masked look-ups (optimum-graphcore's SerializedEmbedding,
    # for heads without a vocabulary); not searched unless a space lists values.
    KnobSpec(
        "input_embedding_serialization",
        "int",
        least=1,
        applies=lambda p, layout: input_embedding_factors(p) != (1,),
        abbrev=lambda v: f"embed/{v}",
        line_rank=23,
        moves=other_usable_values("input_embedding_serialization", input_embedding_factors),
        refusal=input_embedding_refusal,
        ipu_config_key="embedding_serialization_factor",
        omit_at_default=True,
        sampled=True,
        usable=input_embedding_factors,
        space_default=1,
    ),
    # The layout knobs' moves need the model's profile: the guide's own (warmstart.py).
    KnobSpec(
        "splits",
        "paths",
        abbrev=lambda v: "split@" + ",".join(v) if v else "no-splits",
        line_rank=6,
    ),
    KnobSpec("ipus_per_replica", "int", least=1, abbrev=lambda v: f"{v}ipu", line_rank=0),
    KnobSpec("replicas", "int", least=1, abbrev=lambda v: f"x{v}rep", line_rank=1),
)
BY_NAME: dict[str, KnobSpec] = {k.name: k for k in SPEC}


def spec(name: str) -> KnobSpec:
    return BY_NAME[name]


def applies(name: str, problem: KnobProblem, layout: KnobConfig | None = None) -> bool:
    """Whether knob `name` does anything for this problem (and IPU layout: a Config)."""
    return BY_NAME[name].applies_to(problem, layout)


def names(kind: str) -> tuple[str, ...]:
    return tuple(k.name for k in SPEC if k.kind == kind)


#: the knobs a space file sets, and the Config fields that are knobs
SPACE_KNOBS = tuple(k.name for k in SPEC if k.in_space)
WORDS: dict[str, tuple[str, ...]] = {k.name: k.words for k in SPEC if k.kind == "word"}
LINE_ORDER = tuple(k.name for k in sorted(SPEC, key=lambda k: k.line_rank) if k.abbrev is not None)


def replay_params(config: KnobConfig) -> dict[str, Any]:
    """The Optuna parameters that replay `config`'s knobs (the profile-dependent splits and
    checkpoints are replay.py's)."""
    out: dict[str, Any] = {}
    for k in SPEC:
        if k.field and k.kind != "paths":
            out.update(k.replay(config) if k.replay else {k.name: getattr(config, k.name)})
    return out
