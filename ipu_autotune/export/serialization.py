"""The embedding_serialization knob as PopTorch code: the vocabulary projection of an hf:
model's head as `factor` serialised matmuls.

optimum-graphcore does this with `SerializedLinear` (optimum/graphcore/modeling_utils.py and
models/bert/modeling_bert.py): `poptorch.serializedMatMul(x, weight.t(),
MatMulSerializationMode.OutputChannels, factor)`, plus the bias. Here the projection module
keeps its weight (tied to the input embedding or not) and only its forward changes, so the
module paths, the tying and the state dict stay those of the user's model.
"""

from __future__ import annotations

from ..problem import Config, Problem

SERIALIZED_PROJECTION = '''

def _serialized_forward(self, x):
    out = poptorch.serializedMatMul(x, self.weight.t(), poptorch.MatMulSerializationMode.OutputChannels,
                                    self.serialization_factor)
    return out if self.bias is None else out + self.bias


def _serialize_projection(linear, factor):
    """The vocabulary projection as `factor` matmuls over its output channels (optimum-graphcore's
    SerializedLinear); the weight, tied to the embedding or not, is unchanged."""
    linear.serialization_factor = factor
    linear.forward = _serialized_forward.__get__(linear)  # a bound method: copies of the model rebind it
    return linear
'''


def serialization_lines(problem: Problem, config: Config) -> list[str]:
    """The annotate() line that serialises the projection, or none at factor 1."""
    if config.embedding_serialization == 1:
        return []
    from ..models import hf

    path, vocabulary = hf.vocabulary_projection(problem.model, problem.task)
    return [f"_serialize_projection(model.get_submodule({path!r}), {config.embedding_serialization})"
            f"  # {vocabulary:,} words in {config.embedding_serialization} pieces"]
