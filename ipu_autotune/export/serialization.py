"""The embedding_serialization knob as PopTorch code: the vocabulary projection of an hf:
model's head as `factor` serialised matmuls.

optimum-graphcore does this with `SerializedLinear` (optimum/graphcore/modeling_utils.py and
models/bert/modeling_bert.py): `poptorch.serializedMatMul(x, weight.t(),
MatMulSerializationMode.OutputChannels, factor)`, plus the bias. Here the projection module
keeps its weight (tied to the input embedding or not) and only its forward changes, so the
module paths and the tying stay those of the user's model. A vocabulary the factor does not
divide (GPT-2's 50,257 words) is padded first, as optimum-graphcore pads it
(`PipelinedGPT2LMHeadModel.parallelize`: `resize_token_embeddings` to a multiple of the
factor), and the padding words' logits are pushed to -10,000 so the loss and the predictions
are those of the real vocabulary (its `forward` does the same).
"""

from __future__ import annotations

from ..knob_conditions import input_embedding
from ..problem import Config, Problem

SERIALIZED_PROJECTION = '''

def _serialized_forward(self, x):
    out = poptorch.serializedMatMul(x, self.weight.t(), poptorch.MatMulSerializationMode.OutputChannels,
                                    self.serialization_factor)
    if self.bias is not None:
        out = out + self.bias
    padding = out.shape[-1] - self.words
    if padding:  # padding words never win: their logits are -10,000 (optimum-graphcore's mask)
        keep = torch.cat([torch.ones(self.words, dtype=out.dtype, device=out.device),
                          torch.zeros(padding, dtype=out.dtype, device=out.device)])
        out = out * keep + (1 - keep) * -10000.0
    return out


def _serialize_projection(model, path, factor):
    """The vocabulary projection as `factor` matmuls over its output channels (optimum-graphcore's
    SerializedLinear); the weight, tied to the embedding or not, is unchanged. A vocabulary the
    factor does not divide is padded to a multiple of it first (PopART splits only those):
    `model.resize_token_embeddings(words)` gives the user's vocabulary back before saving."""
    words = model.get_submodule(path).out_features
    padded = -(-words // factor) * factor
    if padded > words:
        model.resize_token_embeddings(padded)  # resizes a tied or untied head with the embedding
    linear = model.get_submodule(path)
    linear.serialization_factor, linear.words = factor, words
    linear.forward = _serialized_forward.__get__(linear)  # a bound method: copies of the model rebind it
    return linear
'''  # noqa: E501 (the generated file's own lines, as written out)


SERIALIZED_EMBEDDING = '''

class SerializedEmbedding(torch.nn.Module):
    """The token embedding as `factor` look-ups into slices of its table, each output masked
    to the ids inside its slice and summed: optimum-graphcore's SerializedEmbedding
    (optimum/graphcore/modeling_utils.py), which its BERT-family parallelize() applies with
    embedding_serialization_factor. Only the slice a look-up reads is updated at a time."""

    def __init__(self, table, factor):
        super().__init__()
        rows = table.num_embeddings // factor  # the rules ask that the factor divides them
        pad = table.padding_idx

        def piece(i):
            inside = pad is not None and i * rows <= pad < (i + 1) * rows
            return torch.nn.Embedding.from_pretrained(table.weight[i * rows:(i + 1) * rows].detach(), freeze=False,
                                                      padding_idx=pad - i * rows if inside else None)

        self.rows = rows
        self.split_embeddings = torch.nn.ModuleList(piece(i) for i in range(factor))

    def forward(self, ids):
        out = 0
        for i, embedding in enumerate(self.split_embeddings):
            local = ids - i * self.rows
            inside = ((local >= 0) & (local < self.rows)).detach()
            out = out + embedding(local * inside) * inside.unsqueeze(-1)
        return out

    def to_embedding(self):
        """One nn.Embedding again (to save the model as transformers has it)."""
        return torch.nn.Embedding.from_pretrained(torch.cat([e.weight for e in self.split_embeddings]).detach(),
                                                  freeze=False)
'''  # noqa: E501 (the generated file's own lines, as written out)


def serialization_code(config: Config) -> str:
    """The helper functions the annotate() lines below call, when they call any."""
    return (SERIALIZED_PROJECTION if config.embedding_serialization != 1 else "") + (
        SERIALIZED_EMBEDDING if config.input_embedding_serialization != 1 else ""
    )


def serialization_lines(problem: Problem, config: Config) -> list[str]:
    """The annotate() line that serialises the projection or the token embedding (none at 1)."""
    if config.input_embedding_serialization != 1:
        factor = config.input_embedding_serialization
        embedding = input_embedding(problem)
        assert embedding is not None  # the rules allow the factor only where there is one
        rows = embedding[1]
        return [
            "model.set_input_embeddings(SerializedEmbedding(model.get_input_embeddings(), "
            f"{factor}))  # {rows:,} rows in {factor} look-ups"
        ]
    if config.embedding_serialization == 1:
        return []
    from ..models import hf

    factor = config.embedding_serialization
    projection = hf.vocabulary_projection(problem.model, problem.task)
    assert projection is not None  # the rules allow the factor only where there is one
    path, vocabulary = projection
    padded = hf.padded_vocabulary(vocabulary, factor)
    pieces = (
        f"{vocabulary:,} words in {factor} pieces"
        if padded == vocabulary
        else f"{vocabulary:,} words padded to {padded:,}, in {factor} pieces"
    )
    return [f"_serialize_projection(model, {path!r}, {factor})  # {pieces}"]
