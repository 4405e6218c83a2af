"""The trace keeps for backward what a PopART pipeline keeps, not what PyTorch's autograd keeps:
no dropout masks, and an input passed along unchanged is not a checkpoint's output."""

from typing import Any

import torch
from torch import nn

from ipu_autotune.backends.estimate.layout import stages
from ipu_autotune.problem import Config
from ipu_autotune.profiles.trace import trace_module

BATCH, WIDTH = 4, 64


class DropoutNet(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.first, self.drop, self.second = (
            nn.Linear(WIDTH, WIDTH),
            nn.Dropout(p),
            nn.Linear(WIDTH, 10),
        )

    def forward(self, x: Any) -> Any:
        return self.second(self.drop(self.first(x)))


def _saved(model: nn.Module) -> int:
    model.train()
    return sum(u.saved_bytes for u in trace_module(model, BATCH, (WIDTH,), 10).units)


def test_dropout_keeps_no_mask_for_backward() -> None:
    """PopART's DropoutGradOp redraws the mask from the seed; PyTorch's CPU dropout saves its
    noise tensor. With dropout on, the saved bytes are those of dropout off: the second
    linear keeps its input either way, nothing else."""
    with torch.device("meta"):
        on, off = DropoutNet(0.5), DropoutNet(0.0)
    assert _saved(on) == _saved(off)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, hidden: Any, mask: Any) -> Any:
        return torch.relu(self.proj(hidden)) * mask


class MaskedStack(nn.Module):
    """Like BERT: a mask made once, before the layers, passed to every layer unchanged."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(WIDTH, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(n))
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x: Any) -> Any:
        mask = (x > 0).to(x.dtype)
        hidden = self.embed(x)
        for layer in self.layers:
            hidden = layer(hidden, mask)
        return self.head(hidden)


def test_a_mask_passed_along_is_carried_not_checkpointed() -> None:
    with torch.device("meta"):
        model = MaskedStack()
    profile = trace_module(model, BATCH, (WIDTH,), 10)
    layers = [u for u in profile.units if u.path.startswith("layers.")]
    hidden = BATCH * WIDTH * 4
    # Every layer takes the hidden state and the mask; from the second on, the mask is carried.
    assert layers[0].carried_in_bytes == 0
    assert all(u.carried_in_bytes > 0 for u in layers[1:])
    assert all(u.in_bytes == 2 * hidden and u.carried_in_bytes == hidden for u in layers[1:])

    checkpoints = tuple(u.path for u in layers)
    config = Config(
        ipus_per_replica=2,
        splits=("layers.2",),
        recompute="pipeline",
        checkpoints=checkpoints,
        gradient_accumulation=8,
    )
    first, second = stages(profile, config)
    # layers.0 and layers.1 on the first stage: each checkpoint keeps one hidden state.
    assert first.checkpoint_bytes == 2 * hidden
    # The mask still crosses into the second stage with the hidden state.
    assert second.in_bytes == layers[2].in_bytes > hidden


def test_identical_layers_keep_identical_bytes() -> None:
    """A storage key freed and reused by a later tensor gave it the old tensor's producer:
    some BERT-Large layers counted 31.5 MB of matmul outputs, others 25.2 MB."""
    from ipu_autotune.problem import Problem
    from ipu_autotune.profiles.trace import profile_for

    profile = profile_for(
        Problem(
            "hf:bert-large-uncased",
            4,
            task="question-answering",
            seq_len=384,
            attention_dropout=0.15,
            ipus=16,
        )
    )
    layers = [u for u in profile.units if ".encoder.layer." in u.path]
    assert len(layers) == 24
    assert len({(u.saved_heavy_bytes, u.saved_light_bytes) for u in layers}) == 1
