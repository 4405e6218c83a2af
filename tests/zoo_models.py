"""Models a user might bring that are not torchvision classifiers (issue 10's zoo test)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


def sequential_cnn(num_classes: int = 10) -> nn.Module:
    """Children named "0", "1", ...: split and checkpoint paths are bare indices."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


def mlp(num_classes: int = 10) -> nn.Module:
    """Flat inputs (784 features): no image, so no 8-bit I/O."""
    return nn.Sequential(
        nn.Linear(784, 512),
        nn.ReLU(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, 256),
        nn.ReLU(),
        nn.Linear(256, num_classes),
    )


@dataclass
class ClassifierOutput:
    """Shaped like Hugging Face's ImageClassifierOutput: the scores are `.logits`."""

    logits: torch.Tensor


class LogitsNet(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = sequential_cnn(64)
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x: Any) -> Any:
        return ClassifierOutput(logits=self.classifier(self.features(x)))


def logits_net(num_classes: int = 10) -> nn.Module:
    return LogitsNet(num_classes)
