"""Small models for the numerics tests: importable as `numerics_models:...` (tests/ is on
sys.path)."""

from typing import Any

import torch
from torch import nn


class ScaledMLP(nn.Module):
    """An MLP whose logits are multiplied by `scale`: tiny (1e-4) or huge (1e4) gradients on
    purpose."""

    def __init__(
        self, in_features: int = 48, hidden: int = 64, num_classes: int = 10, scale: float = 1.0
    ) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )
        self.scale = scale

    def forward(self, x: Any) -> Any:
        return self.net(x) * self.scale


class BareMatmul(nn.Module):
    """Logits = x @ W with a bare parameter: no Linear/Conv, so only weight gradients are
    recorded."""

    def __init__(self, in_features: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, num_classes) * 0.05)

    def forward(self, x: Any) -> Any:
        return x.flatten(1) @ self.weight


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: Any) -> Any:
        return self.fc(self.features(x))


def small_cnn(num_classes: int = 10) -> nn.Module:
    return SmallCNN(num_classes)


def fixed_batches() -> Any:
    """--data target: two batches of 8 RGB 16x16 images, labels in [0, 10)."""
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(8, 3, 16, 16, generator=gen), torch.randint(0, 10, (8,), generator=gen))
        for _ in range(2)
    ]


def not_batches() -> Any:
    return [42]
