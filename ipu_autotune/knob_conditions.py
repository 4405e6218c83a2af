"""When a knob applies, and the values a problem refuses: the predicates the knob table
(knob_spec.py) carries, which the space, the rules, the estimator and the guide all ask."""

from __future__ import annotations

from functools import lru_cache

from .knob_types import KnobConfig, KnobProblem


def has_optimizer_state(problem: KnobProblem) -> bool:
    """sgd_combined keeps no separate state: PopTorch optim.SGD(use_combined_accum=True)
    takes no state types and ignores the state location settings (its docstring)."""
    return problem.optimizer != "sgd_combined"


def offload_applies(problem: KnobProblem, layout: KnobConfig | None = None) -> bool:
    """Offloading needs Streaming Memory (Mk1 has none, backends/targets.py) and a state."""
    return problem.target != "mk1" and has_optimizer_state(problem)


def offload_refusal(problem: KnobProblem, config: KnobConfig) -> str | None:
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


def projection_refusal(problem: KnobProblem, config: KnobConfig) -> str | None:
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


def input_embedding_refusal(problem: KnobProblem, config: KnobConfig) -> str | None:
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
