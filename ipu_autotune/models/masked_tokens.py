"""Masked-LM pretraining as Graphcore runs it: the head sees only the masked positions.

transformers' `BertForMaskedLM` projects every position onto the vocabulary (batch x seq_len
x 30522 logits). Graphcore's BERT pretraining gathers the hidden states at the masked
positions first and projects only those: optimum-graphcore's `PipelinedBertForPreTraining.
forward` (optimum/graphcore/models/bert/modeling_bert.py) takes the top-k positions of the
labels and gathers them with `OnehotGather`, a one-hot matrix multiplied by the sequence
(a matmul, which the IPU does well, instead of a gather whose gradient is a scatter);
graphcore/examples' BERT (nlp/bert/pytorch) feeds the positions as an input, at most
`max_predictions_per_sequence` of them (20 at SL128, 76 at SL512).

`--max-predictions N` builds that model: its forward takes `masked_lm_positions` (batch x N)
and `labels` (batch x N, the masked tokens' ids), so the trace the estimator reads and the
exported `TrainingModel` (`_MASKED_TOKEN_MODEL`, export/training_model.py) compute the same.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

#: the prediction head of each family's *ForMaskedLM, applied to the gathered hidden states
HEADS = {"bert": "cls", "roberta": "lm_head"}


def gather_positions(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """hidden (batch x seq x H) at positions (batch x N): a one-hot (batch x N x seq) matmul."""
    one_hot = F.one_hot(positions, hidden.shape[1]).to(hidden.dtype)
    return torch.matmul(one_hot.detach(), hidden)


def masked_token_loss(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    masked_lm_positions: torch.Tensor,
    labels: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder over every position, head over the gathered ones, cross-entropy on their labels."""
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
    logits = getattr(model, HEADS[model.config.model_type])(
        gather_positions(hidden, masked_lm_positions)
    )
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    return loss, logits


def gather_before_head(model: nn.Module) -> nn.Module:
    """The same model object (same modules, paths, weights), its forward taking positions."""
    from transformers.modeling_outputs import MaskedLMOutput

    base = type(model)

    # the model's own class, known at run time only
    class GatheredMaskedLM(base):  # type: ignore[misc, valid-type]
        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            masked_lm_positions: torch.Tensor,
            labels: torch.Tensor,
        ) -> MaskedLMOutput:
            loss, logits = masked_token_loss(
                self, input_ids, attention_mask, masked_lm_positions, labels
            )
            return MaskedLMOutput(loss=loss, logits=logits)

    GatheredMaskedLM.__name__ = GatheredMaskedLM.__qualname__ = f"{base.__name__}MaskedPositions"
    model.__class__ = GatheredMaskedLM
    return model
