"""What a model's forward takes: named inputs with a per-sample shape and a dtype.

An input is written `NAME:SHAPE:DTYPE`, e.g. `input_ids:128:int64` or `pixels:3x224x224:float32`
(the shape of one sample, without the batch dimension). On the command line, one
`--input` per input; in a config file, `inputs = ["input_ids:128:int64", ...]` or tables
`{name = "input_ids", shape = [128], dtype = "int64"}`. The forward is called with them as
keyword arguments, in the order given. Integer inputs are filled with zeros (a valid token
id and class everywhere), masks with ones.

`hf:` models get theirs from the task: token ids and an attention mask of `seq_len`, and
the labels the task's loss needs (the model computes its own loss, as in training).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import torch

from ..errors import UsageError
from .shapes import parse_shape

DTYPES = {
    "int64": torch.int64,
    "int32": torch.int32,
    "float32": torch.float32,
    "float16": torch.float16,
    "bool": torch.bool,
}


class ProblemInputs(Protocol):
    """What the inputs read of a Problem (problem.py), which sits a layer above the models."""

    @property
    def model(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def token_inputs(self) -> bool: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def max_predictions(self) -> int: ...
    @property
    def decoder_seq_len(self) -> int: ...


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.name}:{'x'.join(map(str, self.shape))}:{self.dtype}"

    def tensor(self, batch: int, device: str = "meta") -> torch.Tensor:
        fill = 1 if "mask" in self.name else 0
        return torch.full((batch, *self.shape), fill, dtype=DTYPES[self.dtype], device=device)


_FORMAT = "write NAME:SHAPE:DTYPE, e.g. input_ids:128:int64 or pixels:3x224x224:float32"


def parse_input(text: object) -> InputSpec:
    """One input from `NAME:SHAPE:DTYPE` or a {name, shape, dtype} table."""
    if isinstance(text, dict):
        unknown = set(text) - {"name", "shape", "dtype"}
        if unknown or "name" not in text or "shape" not in text:
            raise UsageError(f"input {text!r}: a table needs name, shape and dtype keys only")
        shape = text["shape"]
        if not isinstance(shape, list):
            raise UsageError(f"input {text!r}: shape must be a list, e.g. [128]")
        text = f"{text['name']}:{'x'.join(map(str, shape))}:{text.get('dtype', 'float32')}"
    if not isinstance(text, str):
        raise UsageError(f"input {text!r}: {_FORMAT}")
    parts = text.split(":")
    if len(parts) == 2:
        parts.append("float32")
    if len(parts) != 3 or not parts[0].isidentifier():
        raise UsageError(f"input '{text}': {_FORMAT}")
    name, shape_text, dtype = parts
    try:
        shape = parse_shape(shape_text)
    except ValueError as exc:
        raise UsageError(f"input '{text}': {exc}; {_FORMAT}") from None
    if dtype not in DTYPES:
        raise UsageError(f"input '{text}': dtype '{dtype}' is not one of {', '.join(DTYPES)}")
    return InputSpec(name, shape, dtype)


def parse_inputs(values: Iterable[object]) -> tuple[str, ...]:
    """Canonical strings (what Problem stores), checked, names unique."""
    specs = [parse_input(v) for v in values]
    names = [s.name for s in specs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise UsageError(f"input '{dup}' given twice; each input needs its own name")
    return tuple(str(s) for s in specs)


def hf_inputs(
    family: str, task: str, seq_len: int, max_predictions: int = 0
) -> tuple[InputSpec, ...]:
    ids = InputSpec("input_ids", (seq_len,), "int64")
    mask = InputSpec("attention_mask", (seq_len,), "int64")
    if max_predictions:  # Graphcore's pretraining input: where the masked tokens are
        return (ids, mask, InputSpec("masked_lm_positions", (max_predictions,), "int64"))
    return (ids, mask)


def hf_labels(
    task: str,
    batch: int,
    seq_len: int,
    device: str = "meta",
    max_predictions: int = 0,
    decoder_seq_len: int = 0,
) -> dict[str, torch.Tensor]:
    """The targets each task's loss takes, as `transformers` names them (with gathered
    masked tokens, the ids of those tokens only). A seq2seq model's labels are the decoder's
    tokens (it shifts them into its decoder inputs), `decoder_seq_len` of them."""

    def zeros(*shape: int) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.int64, device=device)

    if task == "masked-lm" and max_predictions:
        return {"labels": zeros(batch, max_predictions)}
    if task == "seq2seq-lm":
        return {"labels": zeros(batch, decoder_seq_len or seq_len)}
    if task in ("masked-lm", "causal-lm"):
        return {"labels": zeros(batch, seq_len)}
    if task == "question-answering":
        return {"start_positions": zeros(batch), "end_positions": zeros(batch)}
    return {"labels": zeros(batch)}


def problem_inputs(problem: ProblemInputs) -> tuple[InputSpec, ...]:
    """The inputs a problem's model is called with (empty: one float image batch)."""
    from . import hf

    if problem.inputs:
        return tuple(parse_input(s) for s in problem.inputs)
    if problem.token_inputs:
        return hf_inputs(
            hf.architecture(problem.model).family,
            problem.task,
            problem.seq_len,
            problem.max_predictions,
        )
    return ()


def sample_batch(
    problem: ProblemInputs, batch: int, device: str = "meta"
) -> dict[str, torch.Tensor]:
    """Keyword arguments of one forward call, labels included for `hf:` text models."""
    kwargs = {s.name: s.tensor(batch, device) for s in problem_inputs(problem)}
    if problem.token_inputs:
        kwargs.update(
            hf_labels(
                problem.task,
                batch,
                problem.seq_len,
                device,
                problem.max_predictions,
                problem.decoder_seq_len,
            )
        )
    return kwargs
