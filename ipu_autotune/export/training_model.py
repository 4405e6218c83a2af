"""The snippet's TrainingModel for models that take tokens or named inputs (export/python.py
writes the one for an image classifier): what forward takes and the loss it returns."""

from __future__ import annotations

from ..problem import Problem

# hf: models compute their own loss from the labels; token ids stay integers.
_TOKEN_MODEL = '''class TrainingModel(torch.nn.Module):
    """PopTorch training models return the loss from forward; {labels} as transformers names them."""

    def __init__(self, model):
        super().__init__()
        self.model = annotate(model)

    def forward(self, input_ids, attention_mask, {label_args}):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, {label_kwargs})
        return out.logits if out.loss is None else out.loss


'''  # noqa: E501 (the generated file's own lines, as written out)


# --max-predictions: Graphcore's pretraining model (models/masked_tokens.py, the same ops):
# the encoder over every position, the head over the gathered masked ones.
_MASKED_TOKEN_MODEL = '''class TrainingModel(torch.nn.Module):
    """Masked LM on {n} gathered positions per sequence, as Graphcore pretrains BERT: labels are
    the masked tokens' ids (batch x {n}), masked_lm_positions where they sit (batch x {n})."""

    def __init__(self, model):
        super().__init__()
        self.model = annotate(model)

    def forward(self, input_ids, attention_mask, masked_lm_positions, labels):
        hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
        # A one-hot matmul, as optimum-graphcore's OnehotGather: its gradient is a matmul too.
        one_hot = torch.nn.functional.one_hot(masked_lm_positions, hidden.shape[1]).to(hidden.dtype)
        logits = self.model.{head}(torch.matmul(one_hot.detach(), hidden))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


'''  # noqa: E501 (the generated file's own lines, as written out)


def _token_model(problem: Problem) -> str:
    if problem.max_predictions:
        from ..models import hf
        from ..models.masked_tokens import HEADS

        head = HEADS[hf.architecture(problem.model).family]
        return _MASKED_TOKEN_MODEL.format(n=problem.max_predictions, head=head)
    labels = (
        ["start_positions", "end_positions"]
        if problem.task == "question-answering"
        else ["labels"]
    )
    return _TOKEN_MODEL.format(
        labels=" and ".join(labels),
        label_args=", ".join(f"{n}=None" for n in labels),
        label_kwargs=", ".join(f"{n}={n}" for n in labels),
    )


# A factory's named inputs (--input): passed by name; float inputs in the compute dtype.
_NAMED_MODEL = '''class TrainingModel(torch.nn.Module):
    """PopTorch training models return the loss from forward; the inputs by name, then the labels."""

    def __init__(self, model):
        super().__init__()
        self.model = annotate(model)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, {names}, labels=None):
        out = self.model({kwargs})
        out = getattr(out, "logits", out)  # Hugging Face style output objects
        if labels is None:
            return out
        return out, self.loss(out.float(), labels)


'''  # noqa: E501 (the generated file's own lines, as written out)


def _named_model(problem: Problem) -> str:
    from ..models.inputs import problem_inputs

    specs = problem_inputs(problem)
    kwargs = [
        f"{s.name}={s.name}.to(INPUT_DTYPE)"
        if s.dtype.startswith("float")
        else f"{s.name}={s.name}"
        for s in specs
    ]
    return _NAMED_MODEL.format(names=", ".join(s.name for s in specs), kwargs=", ".join(kwargs))


def training_model(problem: Problem) -> str:
    """The TrainingModel class for a model fed token ids (hf:) or a factory's named inputs."""
    return _token_model(problem) if problem.token_inputs else _named_model(problem)
