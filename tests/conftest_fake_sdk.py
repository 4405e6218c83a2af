"""Test helpers for the PopTorch backend: the fake SDK on a path, and a small CNN.

Not a conftest (the lead owns tests/conftest.py): test modules import it. The fake SDK is
put on sys.path only inside `fake_sdk()` and removed afterwards, so no other test ever sees
an importable `poptorch` (backends.sdk_available() would turn True).

The CNN is importable as the model "conftest_fake_sdk:small_cnn" by trial subprocesses,
whose PYTHONPATH `fake_env()` sets to tests/fake_sdk and tests/.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import nn

TESTS = Path(__file__).resolve().parent
FAKE_SDK = TESTS / "fake_sdk"
SMALL_CNN = "conftest_fake_sdk:small_cnn"


class Block(nn.Module):
    """conv-bn-relu twice: one pipeline unit, like a ResNet block without the shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()

    def forward(self, x: Any) -> Any:
        x = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(x)))


class SmallCNN(nn.Module):
    """Units: stem, block1, block2, block3, head. About 3.6 MB of activations per 32x32 sample."""

    def __init__(self, num_classes: int = 10, width: int = 64) -> None:
        super().__init__()
        self.stem = Block(3, width)
        self.block1 = Block(width, width)
        self.block2 = Block(width, 2 * width, stride=2)
        self.block3 = Block(2 * width, 4 * width, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x: Any) -> Any:
        x = self.block3(self.block2(self.block1(self.stem(x))))
        return self.head(self.pool(x).flatten(1))


def small_cnn(num_classes: int = 10) -> nn.Module:
    return SmallCNN(num_classes)


def fake_env(**extra: object) -> dict[str, str]:
    """The `env` for PopTorchBackend: the fake SDK and this folder importable by the child."""
    env = {"PYTHONPATH": os.pathsep.join([str(FAKE_SDK), str(TESTS)])}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _take_sdk_modules() -> dict[str, Any]:
    """Remove (and return) every imported poptorch/pva module."""
    return {
        name: sys.modules.pop(name)
        for name in list(sys.modules)
        if name.split(".")[0] in ("poptorch", "pva")
    }


@contextlib.contextmanager
def fake_sdk() -> Iterator[Any]:
    """A fresh `import poptorch` (the fake) inside the block only; yields the module.

    Nested blocks get their own fresh import and give the outer one its modules back.
    """
    outer = _take_sdk_modules()
    sys.path.insert(0, str(FAKE_SDK))
    importlib.invalidate_caches()
    try:
        yield importlib.import_module("poptorch")
    finally:
        sys.path.remove(str(FAKE_SDK))
        _take_sdk_modules()
        sys.modules.update(outer)
        importlib.invalidate_caches()
