"""Small real data and models for the verify tests: scikit-learn's bundled digits (1,797 8x8
images, shipped inside the package: no download), a small CNN for them, and two models made to
show an FP16 failure: gradients that underflow (VanishingNet), weights whose updates fall below
half an FP16 ulp (LargeWeightClassifier)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def digits() -> Any:
    """Batches of 16 (inputs, labels): 1x8x8 images scaled to [0, 1], labels 0-9, in a fixed
    shuffled order (a DataLoader, as `numerics --data` and `verify --data` both take)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    return torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x[order], y[order]), batch_size=16
    )


def _digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    loader = digits()
    xs, ys = zip(*loader, strict=True)
    return torch.cat(xs), torch.cat(ys)


def _loader(x: torch.Tensor, y: torch.Tensor) -> Any:
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)


def digits_labels_beyond_classes() -> Any:
    """Bad data: the digits with labels 5-14 (for --num-classes 10)."""
    x, y = _digits_tensors()
    return _loader(x, y + 5)


def digits_one_class() -> Any:
    """Bad data: every label 3."""
    x, y = _digits_tensors()
    return _loader(x, torch.full_like(y, 3))


def digits_wrong_shape() -> Any:
    """Bad data: 1x6x6 crops, which DigitsNet's linear layer (16x4x4 inputs) cannot take."""
    x, y = _digits_tensors()
    return _loader(x[:, :, :6, :6].contiguous(), y)


class DigitsNet(nn.Module):
    """Conv, pool, two linear layers: about 10k weights."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, num_classes)
        )

    def forward(self, x: Any) -> Any:
        return self.head(self.features(x))


def digits_net(num_classes: int = 10) -> nn.Module:
    return DigitsNet(num_classes)


class VanishingNet(nn.Module):
    """Eight tanh layers initialised small (gain 0.2): activations and gradients shrink about 5x
    per layer, so most weight gradients of a mean loss fall below FP16's 2^-24 at loss scale 1.
    Adam normalises its updates, so in FP32 it trains regardless."""

    def __init__(
        self, num_classes: int = 10, depth: int = 8, width: int = 64, gain: float = 0.1
    ) -> None:
        super().__init__()
        self.layers = tanh_mlp(num_classes, depth, width, gain)

    def forward(self, x: Any) -> Any:
        return self.layers(x)


def vanishing_net(num_classes: int = 10) -> nn.Module:
    return VanishingNet(num_classes)


class LargeWeightClassifier(nn.Module):
    """A linear classifier whose weights start at magnitudes 0.25-0.5 (random signs), where an FP16
    ulp is 2^-12: an update below 2^-13 rounds away under round-to-nearest."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.linear = nn.Linear(64, num_classes)
        with torch.no_grad():
            for t in (self.linear.weight, self.linear.bias):
                t.copy_(
                    (torch.rand_like(t) * 0.25 + 0.25) * torch.randint_like(t, 2).mul(2).sub(1)
                )

    def forward(self, x: Any) -> Any:
        return self.linear(x.flatten(1))


def large_weight_classifier(num_classes: int = 10) -> nn.Module:
    return LargeWeightClassifier(num_classes)


def shallow_vanishing_net(num_classes: int = 10) -> nn.Module:
    """Five such layers: small gradients over a narrower range, which one loss scale can hold."""
    return VanishingNet(num_classes, depth=5)


class AttentionBlock(nn.Module):
    """A pre-norm transformer block whose attention is written in `forward`, unscaled (no
    1/sqrt(d)): `q @ k.T`, softmax, `@ v`, residual additions. With `qk_std` large the scores
    pass FP16's 65504: an inf score makes its softmax row NaN in FP16. The last scores and
    probabilities are kept (`scores`, `probs`) for the tests to read."""

    def __init__(self, dim: int = 32, qk_std: float = 1.0) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        with torch.no_grad():
            for lin in (self.q, self.k):
                lin.weight.normal_(0.0, qk_std)
        self.scores = self.probs = torch.empty(0)

    def forward(self, x: Any) -> Any:
        h = self.norm1(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        scores = q @ k.transpose(-2, -1)
        probs = scores.softmax(dim=-1)
        self.scores, self.probs = scores.detach(), probs.detach()
        x = x + self.o(probs @ v)
        return x + self.mlp(self.norm2(x))


def mlp(num_classes: int = 10) -> nn.Module:
    """Three ReLU layers of 64 on the flattened image, PyTorch's default initialisation."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def tanh_mlp(
    num_classes: int = 10, depth: int = 6, width: int = 48, gain: float = 0.1
) -> nn.Module:
    """An MLP of `depth` tanh layers initialised small (weights' std gain / sqrt(width), zero
    biases): its backward signal shrinks about 10x a layer, so at loss scale 1 most of its
    weight gradients fall below FP16's 2^-24; Adam normalises the update, so in FP32 it trains
    regardless."""
    layers: list[nn.Module] = [nn.Flatten()]
    for i in range(depth):
        linear = nn.Linear(64 if i == 0 else width, width)
        nn.init.normal_(linear.weight, std=gain / width**0.5)
        nn.init.zeros_(linear.bias)
        layers += [linear, nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(width, num_classes))


def plain_cnn(num_classes: int = 10) -> nn.Module:
    """Three convolutions and a linear head, no batch norm."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, num_classes),
    )


class BertDigits(nn.Module):
    """A two-layer BERT encoder from `transformers`, built from its config (nothing downloaded):
    each 8x8 image is 8 tokens of 8 pixels, embedded by a linear layer and fed as
    `inputs_embeds`; the mean of the last hidden states is classified."""

    def __init__(self, num_classes: int = 10, hidden: int = 32) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(
            hidden_size=hidden,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=2 * hidden,
            max_position_embeddings=16,
            vocab_size=8,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        config._attn_implementation = "eager"
        self.embed = nn.Linear(8, hidden)
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Any) -> Any:
        tokens = self.embed(x.reshape(x.shape[0], 8, 8))
        return self.head(self.encoder(inputs_embeds=tokens).last_hidden_state.mean(dim=1))


def bert_digits(num_classes: int = 10) -> nn.Module:
    return BertDigits(num_classes)


def deep_tanh_mlp(num_classes: int = 10) -> nn.Module:
    """Eight such tanh layers: at loss scale 1 most weight gradients flush to zero in FP16."""
    return tanh_mlp(num_classes, depth=8)


def _large(t: torch.Tensor) -> None:
    """Magnitudes 0.25-0.5 with random signs: an FP16 ulp there is 2^-12."""
    t.copy_((torch.rand_like(t) * 0.25 + 0.25) * torch.randint_like(t, 2).mul(2).sub(1))


def large_weight_mlp(num_classes: int = 10) -> nn.Module:
    """An MLP whose weights start at magnitudes 0.25-0.5, each layer normalised (LayerNorm, no
    affine): it learns at an Adam learning rate whose updates fall below half an FP16 ulp."""
    model = nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, 32),
        nn.LayerNorm(32, elementwise_affine=False),
        nn.ReLU(),
        nn.Linear(32, num_classes),
    )
    with torch.no_grad():
        for p in model.parameters():
            _large(p)
    return model


class AttentionDigits(nn.Module):
    """AttentionBlock on the digits: each 8x8 image is 8 tokens of 8 pixels; the block's mean
    output classified. At qk_std 12 about 1 % of its unscaled attention scores pass FP16's
    65504."""

    def __init__(self, num_classes: int = 10, qk_std: float = 12.0) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 32)
        self.block = AttentionBlock(32, qk_std)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: Any) -> Any:
        return self.head(self.block(self.embed(x.reshape(x.shape[0], 8, 8))).mean(dim=1))


def attention_digits(num_classes: int = 10) -> nn.Module:
    return AttentionDigits(num_classes)
