"""The knob spec: one entry per knob, the table every layer reads.

An entry says what a knob is (its kind and allowed values), when it applies (target,
optimizer, model inputs, IPU layout), how a trial line writes it and where, the Optuna
parameters that replay it, its neighbour moves for the guide's climbs, its refusal (the
rule) and its ipu_config.json key. Parsing, the search space, the rules, the warm starts,
the trial line and the exports read the table; the estimator asks it whether a knob
applies. The table's order is the order the guide tries single changes.

Plain values only: `problem` and `config` below are a Problem and a Config, read by
attribute, so the module sits under `problem.py` (which parses with it): its types say only
what it reads of them (KnobProblem, KnobConfig), not even a type-only import reaches up.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, Self, TypeAlias, TypeVar

# The allowed values of the word-valued knobs.
PRECISIONS = ("32.32", "16.32", "16.16")
PARTIALS = ("float", "half")
EXECUTIONS = ("pipelined", "sharded")
RECOMPUTE_MODES = ("default", "none", "standard", "norm_only", "pipeline", "all")
STATE_DTYPES = ("float", "half")
LOADER_MODES = ("sync", "async")  # poptorch.DataLoaderMode.Sync / .Async


class KnobProblem(Protocol):
    """What the table reads of a Problem."""

    @property
    def model(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def optimizer(self) -> str: ...
    @property
    def trainer(self) -> str: ...
    @property
    def global_batch(self) -> int | None: ...
    @property
    def input_shape(self) -> tuple[int, ...]: ...
    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def token_inputs(self) -> bool: ...


class KnobConfig(Protocol):
    """What the table reads of a Config (an IPU layout is one too), and its `replace`."""

    @property
    def precision(self) -> str: ...
    @property
    def partials(self) -> str: ...
    @property
    def half_compute(self) -> bool: ...
    @property
    def loss_scaling(self) -> float | str: ...
    @property
    def recompute(self) -> str: ...
    @property
    def available_memory_proportion(self) -> tuple[float, ...]: ...
    @property
    def optimizer_offload(self) -> bool: ...
    @property
    def ipus_per_replica(self) -> int: ...
    @property
    def replicas(self) -> int: ...
    @property
    def embedding_serialization(self) -> int: ...
    @property
    def input_embedding_serialization(self) -> int: ...
    def replace(self, **changes: Any) -> Self: ...


_Config = TypeVar("_Config", bound=KnobConfig)


class Moves(Protocol):
    """(problem, config, the space's values of the knob) -> configs one change away, each of
    the given config's own type."""

    def __call__(
        self, problem: KnobProblem, config: _Config, values: list[Any], /
    ) -> Iterable[_Config]: ...


#: (problem, IPU layout or None) -> whether the knob does anything
Applies: TypeAlias = Callable[[KnobProblem, KnobConfig | None], bool]
#: problem -> the values a knob can take there
Usable: TypeAlias = Callable[[KnobProblem], Collection[Any]]


# --- when a knob applies -----------------------------------------------------------------


def has_optimizer_state(problem: KnobProblem) -> bool:
    """sgd_combined keeps no separate state: PopTorch optim.SGD(use_combined_accum=True)
    takes no state types and ignores the state location settings (its docstring)."""
    return problem.optimizer != "sgd_combined"


def offload_applies(problem: KnobProblem, layout: KnobConfig | None = None) -> bool:
    """Offloading needs Streaming Memory (Mk1 has none, backends/targets.py) and a state."""
    return problem.target != "mk1" and has_optimizer_state(problem)


def _offload_refusal(problem: KnobProblem, config: KnobConfig) -> str | None:
    if config.optimizer_offload and problem.target == "mk1":
        return (
            "optimizer_offload needs Streaming Memory, which Mk1 IPUs do not have; set it to false"
        )
    return None


def sharding_applies(problem: KnobProblem, layout: KnobConfig | None) -> bool:
    """Replicated tensor sharding needs replicas to shard over and a state to shard."""
    assert layout is not None, "whether replicated tensor sharding applies depends on the replicas"
    return layout.replicas > 1 and has_optimizer_state(problem)


def takes_images(problem: KnobProblem) -> bool:
    """8-bit I/O sends uint8 images normalised per channel: only for [C, H, W] with C 1 or 3,
    and not for token ids or a factory's named inputs."""
    return (
        len(problem.input_shape) == 3
        and problem.input_shape[0] in (1, 3)
        and not (problem.token_inputs or problem.inputs)
    )


def pads_vocabulary(model: str) -> bool:
    """Only GPT-2's parallelize() pads the vocabulary to a multiple of the factor
    (models/gpt2/modeling_gpt2.py, PipelinedGPT2LMHeadModel.parallelize: resize_token_embeddings);
    BERT's and RoBERTa's give SerializedLinear the vocabulary as it is."""
    from .models import hf

    return hf.architecture(model).family == "gpt2"


def projection_factors(problem: KnobProblem, optimum: bool | None = None) -> tuple[int, ...]:
    """The embedding_serialization factors the target can run (`optimum`: optimum-graphcore's
    IPUTrainer; None: the problem's trainer). PopART splits only output channels the factor
    divides (willow/src/op/matmul.cpp, MatMulOp::setup): the snippet pads any vocabulary
    first; optimum pads GPT-2's only (BERT's 30,522 words: 1 and 2; RoBERTa's 50,265: 1)."""
    from .models import hf

    factors = hf.serialization_factors(problem.model, problem.task)
    optimum = problem.trainer == "optimum" if optimum is None else optimum
    if not optimum or factors == (1,) or pads_vocabulary(problem.model):
        return factors
    projection = hf.vocabulary_projection(problem.model, problem.task)
    assert projection is not None  # factors other than (1,): there is a vocabulary projection
    words = projection[1]
    return tuple(f for f in factors if words % f == 0)


def _projection_refusal(problem: KnobProblem, config: KnobConfig) -> str | None:
    """A factor splits the vocabulary projection's output channels, so the head needs one.
    PopART refuses a factor that does not divide them (willow/src/op/matmul.cpp,
    MatMulOp::setup); the export pads such a vocabulary first (hf.padded_vocabulary)."""
    if config.embedding_serialization == 1:
        return None
    from .models import hf

    found = (
        hf.vocabulary_projection(problem.model, problem.task) if hf.is_hf(problem.model) else None
    )
    if found is None:
        return (
            f"embedding_serialization {config.embedding_serialization} needs an hf: model whose "
            "head projects onto the vocabulary (masked-lm, causal-lm, seq2seq-lm); set "
            "embedding_serialization = 1"
        )
    if config.embedding_serialization not in hf.SERIALIZATION_FACTORS:
        usable = ", ".join(map(str, hf.SERIALIZATION_FACTORS))
        return f"embedding_serialization {config.embedding_serialization} is not one of {usable}"
    return None


@lru_cache(maxsize=16)
def _token_embedding(model: str, task: str) -> tuple[str, int, int] | None:
    from torch import nn

    from .models import hf

    built = hf.build_hf_model(model, task, 2)
    table = built.get_input_embeddings()
    if not isinstance(table, nn.Embedding):  # image models embed patches, not tokens
        return None
    return (
        next(p for p, m in built.named_modules() if m is table),
        table.num_embeddings,
        table.embedding_dim,
    )


def input_embedding(problem: KnobProblem) -> tuple[str, int, int] | None:
    """(module path, rows, width) of the token embedding input_embedding_serialization splits:
    hf: models whose head does not project onto the vocabulary (that projection is
    embedding_serialization's, as optimum-graphcore splits one or the other with its
    embedding_serialization_factor); None elsewhere."""
    from .models import hf

    if not hf.is_hf(problem.model) or problem.task in hf.VOCABULARY_TASKS:
        return None
    return _token_embedding(problem.model, problem.task)


def input_embedding_factors(problem: KnobProblem) -> tuple[int, ...]:
    """Factors that divide the embedding's rows: optimum-graphcore's SerializedEmbedding
    asserts `num_embeddings % serialization_factor == 0` (optimum/graphcore/modeling_utils.py),
    and nothing pads them (BERT's 30,522 rows: 1 and 2)."""
    from .models import hf

    found = input_embedding(problem)
    return tuple(f for f in hf.SERIALIZATION_FACTORS if found and found[1] % f == 0) or (1,)


def _input_embedding_refusal(problem: KnobProblem, config: KnobConfig) -> str | None:
    factor = config.input_embedding_serialization
    if factor == 1:
        return None
    embedding = input_embedding(problem)
    if embedding is None:
        return (
            f"input_embedding_serialization {factor} needs an hf: text model without a "
            "vocabulary head (a vocabulary head is split by embedding_serialization); set "
            "input_embedding_serialization = 1"
        )
    if factor not in input_embedding_factors(problem):
        usable = ", ".join(map(str, input_embedding_factors(problem)))
        return (
            f"input_embedding_serialization {factor} does not divide the {embedding[1]:,} "
            "embedding rows (optimum-graphcore's SerializedEmbedding needs it to); use one of "
            f"{usable}"
        )
    return None


# --- neighbour moves ---------------------------------------------------------------------


def toggle(name: str) -> Moves:
    def moves(problem: KnobProblem, config: _Config, values: list[Any]) -> Iterable[_Config]:
        yield config.replace(**{name: not getattr(config, name)})

    return moves


def other_values(name: str) -> Moves:
    def moves(problem: KnobProblem, config: _Config, values: list[Any]) -> Iterable[_Config]:
        for v in values:
            if v != getattr(config, name):
                yield config.replace(**{name: v})

    return moves


def other_usable_values(name: str, usable: Usable) -> Moves:
    """other_values, less those the problem cannot take (the sampler leaves them out too)."""

    def moves(problem: KnobProblem, config: _Config, values: list[Any]) -> Iterable[_Config]:
        yield from other_values(name)(problem, config, [v for v in values if v in usable(problem)])

    return moves


def every_value(name: str) -> Moves:
    """Each value of the space, the config's own included (a climb compares it like the others)."""

    def moves(problem: KnobProblem, config: _Config, values: list[Any]) -> Iterable[_Config]:
        for v in values:
            yield config.replace(**{name: v})

    return moves


def _precision_moves(
    problem: KnobProblem, config: _Config, values: list[Any]
) -> Iterable[_Config]:
    for p in values:
        if p != config.precision:
            yield config.replace(
                precision=p,
                loss_scaling=1.0 if p == "32.32" else 1024.0,
                partials="float",
                stochastic_rounding=p == "16.16",
            )


def _partials_moves(problem: KnobProblem, config: _Config, values: list[Any]) -> Iterable[_Config]:
    if config.half_compute:
        yield config.replace(partials="half" if config.partials == "float" else "float")


def _accumulation_moves(
    problem: KnobProblem, config: _Config, values: list[Any]
) -> Iterable[_Config]:
    if not problem.global_batch:  # a fixed global batch fixes the accumulation
        yield from every_value("gradient_accumulation")(problem, config, values)


def _amp_moves(problem: KnobProblem, config: _Config, values: list[Any]) -> Iterable[_Config]:
    for a in values:
        yield config.replace(available_memory_proportion=(a,) * config.ipus_per_replica)


# --- the table ---------------------------------------------------------------------------


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
        "precision", "word", PRECISIONS, abbrev=lambda v: v, line_rank=3, moves=_precision_moves
    ),
    KnobSpec(
        "partials",
        "word",
        PARTIALS,
        abbrev=lambda v: f"partials:{v}",
        line_rank=19,
        moves=_partials_moves,
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
        moves=_amp_moves,
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
        refusal=_offload_refusal,
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
        moves=_accumulation_moves,
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
        refusal=_projection_refusal,
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
        refusal=_input_embedding_refusal,
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
