"""The meta-device tracer: units where BeginBlock can go, parameters, FLOPs, activations."""

from typing import Any

import pytest
import torchvision

from ipu_autotune.problem import Problem
from ipu_autotune.profiles.trace import profile_for, trace_model


def test_resnet101_units_are_stem_blocks_and_head() -> None:
    p = trace_model("resnet101", 4, (3, 64, 64), 1000)
    paths = [u.path for u in p.units]
    blocks = [f"layer{i}.{j}" for i, n in ((1, 3), (2, 4), (3, 23), (4, 3)) for j in range(n)]
    assert paths == ["conv1", *blocks, "fc"]
    # Norms, activations and pools follow the op they belong to.
    assert set(p.units[0].members) == {"bn1", "relu", "maxpool"}
    assert "avgpool" in p.units[-2].members


def test_parameters_match_torchvision() -> None:
    p = trace_model("resnet50", 2, (3, 224, 224), 1000)
    expected = sum(t.numel() for t in torchvision.models.resnet50().parameters())
    assert p.params == expected


def test_resnet50_forward_flops_match_published_macs() -> None:
    # torchvision documents 4.09 GFLOPS (multiply-adds) per 224x224 image for ResNet-50.
    p = trace_model("resnet50", 1, (3, 224, 224), 1000)
    conv_matmul = sum(u.flops.get("conv", 0) + u.flops.get("matmul", 0) for u in p.units)
    assert conv_matmul / 2 == pytest.approx(4.09e9, rel=0.03)


def test_activation_bytes_scale_with_micro_batch() -> None:
    a = trace_model("resnet18", 2, (3, 64, 64), 10)
    b = trace_model("resnet18", 8, (3, 64, 64), 10)
    assert sum(u.saved_bytes for u in b.units) == pytest.approx(
        4 * sum(u.saved_bytes for u in a.units), rel=0.01
    )
    assert b.units[5].in_bytes == 4 * a.units[5].in_bytes


def test_vit_units_are_encoder_layers() -> None:
    p = trace_model("vit_b_16", 1, (3, 224, 224), 1000)
    paths = [u.path for u in p.units]
    assert paths[0] == "conv_proj" and paths[-1] == "heads.head"
    assert paths[1:-1] == [f"encoder.layers.encoder_layer_{i}" for i in range(12)]


def test_trace_is_cached_per_problem() -> None:
    problem = Problem("resnet18", 4, input_shape=(3, 32, 32))
    assert profile_for(problem) is profile_for(Problem("resnet18", 4, input_shape=(3, 32, 32)))
    assert profile_for(problem) is not profile_for(Problem("resnet18", 8, input_shape=(3, 32, 32)))


def test_a_wrapped_plain_model_is_opened_up() -> None:
    """TrainingModel(model) in the exported snippet: stages begin inside the wrapped model."""
    import torch
    from torch import nn

    from ipu_autotune.profiles.trace import trace_module

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2, self.fc = (
                nn.Conv2d(3, 8, 3),
                nn.Conv2d(8, 8, 3),
                nn.Linear(8 * 28 * 28, 10),
            )

        def forward(self, x: Any) -> Any:
            return self.fc(self.conv2(self.conv1(x)).flatten(1))

    class WithLoss(nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model, self.loss = model, nn.CrossEntropyLoss()

        def forward(self, x: Any) -> Any:
            return self.model(x)

    with torch.device("meta"):
        wrapped = WithLoss(Net())
    assert [u.path for u in trace_module(wrapped, 2, (3, 32, 32), 10).units] == [
        "model.conv1",
        "model.conv2",
        "model.fc",
    ]
