"""Every model the tool accepts tunes and exports code that runs (issue 10, must-show 4).

Each model tunes 20 trials on the estimator (numerics off: they are not the point here),
its best config is exported, and the exported TrainingModel runs forward and loss on the
`meta` device with the fake PopTorch (BeginBlock, recomputation checkpoints, 8-bit input
normalisation, output objects with `.logits`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest_fake_sdk import fake_sdk

from ipu_autotune.cli import main
from ipu_autotune.models.zoo import build_model
from ipu_autotune.problem import Config

# (model, input shape, IPUs, classes): small inputs where the family allows
ZOO = [
    ("zoo_models:sequential_cnn", (3, 32, 32), 2, 10),
    ("zoo_models:mlp", (784,), 2, 10),
    ("zoo_models:logits_net", (3, 32, 32), 2, 10),
    ("resnet18", (3, 32, 32), 2, 100),
    ("resnext50_32x4d", (3, 32, 32), 2, 100),
    ("wide_resnet50_2", (3, 32, 32), 2, 100),
    ("efficientnet_b0", (3, 32, 32), 2, 100),
    ("mobilenet_v3_small", (3, 32, 32), 2, 100),
    ("regnet_y_400mf", (3, 32, 32), 2, 100),
    ("convnext_tiny", (3, 32, 32), 2, 100),
    ("swin_t", (3, 64, 64), 2, 100),
    ("vit_b_16", (3, 224, 224), 4, 100),  # torchvision's ViT takes 224 only
]


@pytest.fixture(scope="module")
def poptorch() -> Iterator[Any]:
    with fake_sdk() as module:
        yield module


@pytest.mark.slow
@pytest.mark.parametrize("model,shape,ipus,classes", ZOO, ids=[z[0].split(":")[-1] for z in ZOO])
def test_tunes_exports_and_the_export_runs(
    poptorch: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    model: Any,
    shape: Any,
    ipus: Any,
    classes: Any,
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            model,
            "--batch-size",
            "4",
            "--input-shape",
            ",".join(map(str, shape)),
            "--num-classes",
            str(classes),
            "--ipus",
            str(ipus),
            "--trials",
            "20",
            "--seed",
            "0",
            "--no-numerics",
            "--json",
            "--backend",
            "estimate",
            "--storage",
            f"sqlite:///{tmp_path / 'db.sqlite'}",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    best = result["best"]
    assert best is not None, f"{model}: nothing fits"
    config = Config.from_dict(best["config"], "best")
    if len(shape) != 3:
        assert not any(
            json.loads(line)["config"]["eight_bit_io"]
            for line in (out / "trials.jsonl").read_text().splitlines()
        )

    run_export(out / "best_options.py", model, shape, classes, config)
    # the baseline (trial 0) too: on 2+ IPUs it carries a split, e.g. "6" in an nn.Sequential
    baseline = tmp_path / "baseline.py"
    assert (
        main(
            [
                "export",
                "--study",
                result["study"],
                "--storage",
                f"sqlite:///{tmp_path / 'db.sqlite'}",
                "--trial",
                "0",
                "-o",
                str(baseline),
            ]
        )
        == 0
    )
    base_config = Config.from_dict(result["baseline"]["config"], "baseline")
    assert base_config.ipus_per_replica == ipus and len(base_config.splits) == ipus - 1
    run_export(baseline, model, shape, classes, base_config)


def run_export(path: Any, model: str, shape: Any, classes: int, config: Config) -> None:
    """The exported TrainingModel, forward and loss on the meta device, PopTorch being the fake."""
    ns: dict[str, Any] = {}
    exec(path.read_text(), ns)
    training = ns["TrainingModel"](build_model(model, classes, device="meta")).to(
        "meta"
    )  # buffers too
    opts = ns["make_options"]()
    ns["make_optimizer"](training)
    dtype = torch.uint8 if config.eight_bit_io else ns["INPUT_DTYPE"]
    x = torch.empty((4, *shape), dtype=dtype, device="meta")
    labels = torch.zeros(4, dtype=torch.long, device="meta")
    logits, loss = training(x, labels)
    assert tuple(logits.shape) == (4, classes) and loss.dim() == 0
    assert repr(opts)  # the options object was built without error
