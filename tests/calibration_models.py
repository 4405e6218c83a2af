"""Models the calibration points need that torchvision does not ship."""

from typing import Any

import torch
from torch import nn


class MixedPrecisionTutorialCNN(nn.Module):
    """The CNN of Graphcore's PopTorch mixed-precision tutorial (128x128 single-channel input)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 5, 3)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(5, 12, 5)
        self.norm = nn.GroupNorm(3, 12)
        self.fc1 = nn.Linear(41772, 100)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(100, num_classes)
        self.log_softmax = nn.LogSoftmax(dim=1)

    def forward(self, x: Any) -> Any:
        x = self.pool(self.relu(self.conv1(x)))
        x = self.norm(self.relu(self.conv2(x)))
        x = torch.flatten(x, start_dim=1)
        x = self.relu(self.fc1(x))
        return self.log_softmax(self.fc2(x))
