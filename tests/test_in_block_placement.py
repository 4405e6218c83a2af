"""Splits and checkpoints inside a block, as PopTorch places them (issue 42, must show 1).

`BeginBlock` and `recomputationCheckpoint` take any submodule that runs. The estimator cuts
the block there (profiles/refine.py): what crosses is what is live at the cut, counted here
by hand for an MBConv with its skip connection and for a GPT-2 layer split at its MLP.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest_fake_sdk import fake_sdk

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.backends.estimate.layout import stages
from ipu_autotune.cli import main
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.refine import refined
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations

FP32 = 4


def _unit(profile: Any, path: Any) -> Any:
    return next(u for u in profile.units if u.path == path)


def test_an_mbconv_split_carries_the_block_input_and_the_partial_output_across() -> None:
    """features.2.1 (24 -> 144 -> 24 channels at 56x56, stride 1: a skip connection) split at
    its projection `block.3`: the block's input, kept for the residual add, and the
    squeeze-excitation's 144-channel output cross to IPU1; both are IPU1's stage input."""
    b = 2
    p = Problem(
        "efficientnet_b0", b, input_shape=(3, 224, 224), num_classes=1000, optimizer="sgd", ipus=2
    )
    c = Config(
        precision="16.16",
        ipus_per_replica=2,
        gradient_accumulation=8,
        splits=("features.2.1.block.3",),
    )
    skip, partial = b * 24 * 56 * 56 * FP32, b * 144 * 56 * 56 * FP32
    piece = _unit(refined(profile_for(p), c.splits), "features.2.1.block.3")
    assert (piece.in_bytes, piece.carried_in_bytes) == (skip + partial, skip)

    first, second = stages(profile_for(p), c)
    assert first.out_bytes == second.in_bytes == skip + partial
    m = EstimateBackend().measure(p, c)
    # IPU1, the last stage under pipeline recomputation, stashes its input once per micro-batch
    # in flight (2(N - k) - 1 = 1), in FP16
    assert m.breakdown[1]["stash"] == (skip + partial) // 2
    assert violations(p, c, profile_for(p).module_order) == []


def test_a_split_at_a_gpt2_mlp_carries_the_residual_the_mlp_input_and_the_mask() -> None:
    """GPT-2's layer 3 split at `mlp`: the residual stream after attention and ln_2's output
    (each batch x seq x 768) cross, and the causal mask (batch x 1 x seq x seq, FP32) every later
    layer reads; the mask is carried (an input passed along), the two others are produced."""
    b, s = 2, 16
    p = Problem("hf:gpt2", b, task="causal-lm", seq_len=s, optimizer="adamw", ipus=4)
    profile = profile_for(p)
    fine = refined(profile, ("transformer.h.3.mlp",))
    piece, head = _unit(fine, "transformer.h.3.mlp"), _unit(fine, "transformer.h.3")
    mask = b * s * s * FP32
    assert (piece.in_bytes, piece.carried_in_bytes) == (2 * b * s * 768 * FP32 + mask, mask)
    assert piece.params == 768 * 3072 + 3072 + 3072 * 768 + 768  # c_fc and c_proj
    whole = _unit(profile, "transformer.h.3")
    assert head.params + piece.params == whole.params and head.ops + piece.ops == whole.ops

    c = Config(
        precision="16.16",
        ipus_per_replica=4,
        gradient_accumulation=16,
        splits=("transformer.h.3.mlp", "transformer.h.6", "transformer.h.9"),
    )
    assert violations(p, c, profile.module_order) == []
    assert stages(profile, c)[1].in_bytes == 2 * b * s * 768 * FP32 + mask


def test_a_checkpoint_inside_a_block_ends_a_recomputation_segment(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    """ResNet-18's layer2.0 checkpointed at conv2: its output is kept (the block input it adds
    to is not its own), and estimate answers with exit 0 where it used to refuse."""
    b = 8
    p = Problem("resnet18", b, input_shape=(3, 32, 32), num_classes=10, ipus=1)
    c = Config(ipus_per_replica=1, recompute="all", checkpoints=("layer2.0.conv2",))
    (stage,) = stages(profile_for(p), c)
    conv2_out = b * 128 * 4 * 4 * FP32
    (unsplit,) = stages(profile_for(p), c.replace(checkpoints=()))
    assert stage.checkpoint_bytes == conv2_out and unsplit.checkpoint_bytes == 0
    assert stage.max_segment_saved < unsplit.max_segment_saved
    code = main(
        [
            "estimate",
            "resnet18",
            "--batch-size",
            "8",
            "--image-size",
            "32",
            "--set",
            "ipus_per_replica=1",
            "--set",
            "splits=[]",
            "--set",
            "recompute=all",
            "--set",
            "checkpoints=layer2.0.conv2",
            "--json",
        ]
    )
    assert code == 0 and json.loads(capsys.readouterr()[0])["feasible"]


# --- what PopTorch refuses is still refused, in one line with the fix --------------------------

EFFNET = Problem(
    "efficientnet_b0", 16, input_shape=(3, 224, 224), num_classes=1000, optimizer="rmsprop", ipus=4
)


@pytest.mark.parametrize(
    "splits,needle",
    [
        (
            ("features.2", "features.2.0", "features.5.0"),
            "leaves the stage from 'features.2' with nothing to run",
        ),
        (("features.2.0", "features.2.0.block.0", "features.5.0"), "drop one of the two splits"),
        (("features.3.1", "features.2.0.block.3", "features.5.0"), "out of execution order"),
        (
            ("features.2.0.block.9", "features.3.1", "features.5.0"),
            "not a module of the model that runs",
        ),
    ],
)
def test_an_empty_stage_a_backward_order_and_a_module_that_does_not_run_are_refused(
    splits: tuple[Any, ...], needle: str
) -> None:
    c = Config(precision="16.16", ipus_per_replica=4, gradient_accumulation=16, splits=splits)
    found = violations(EFFNET, c, profile_for(EFFNET).module_order)
    assert len(found) == 1 and needle in found[0], found


# --- Graphcore's published EfficientNet-B0 layout, estimated and compiled ------------------------

POINTS = {
    p["id"]: p
    for p in tomllib.loads((Path(__file__).parent / "calibration" / "points.toml").read_text())[
        "point"
    ]
}


@pytest.mark.parametrize("point_id", ["M23", "M24"], ids=["mk2", "mk1"])
def test_the_published_efficientnet_b0_layouts_estimate_with_exit_0_and_fit(
    point_id: str, capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    """Mk2 splits at four IPUs; Mk1 at three, which PopTorch reserves as four (M24's note)."""
    point = POINTS[point_id]
    problem = "\n".join(f"{k} = {json.dumps(v)}" for k, v in point["problem"].items())
    config = "\n".join(f"{k} = {json.dumps(v)}" for k, v in point["config"].items())
    (in_tmp / "c.toml").write_text(f"[problem]\n{problem}\n\n[config]\n{config}\n")
    assert main(["estimate", "--config", "c.toml", "--json"]) == 0
    m = json.loads(capsys.readouterr()[0])
    assert m["feasible"] and m["rules_broken"] == []
    # IPU1 begins with the piece of features.2.0 from its projection on, not at a block's start
    p, c = Problem.from_dict(point["problem"]), Config.from_dict(point["config"])
    fine = refined(profile_for(p), c.splits)
    assert [fine.units[s.first].path for s in stages(profile_for(p), c)][1:] == list(c.splits)


@pytest.fixture(scope="module")
def poptorch() -> Iterator[Any]:
    with fake_sdk() as module:
        yield module


def test_the_fake_poptorch_places_begin_block_on_the_submodule_inside_the_block(
    poptorch: Any, tmp_path: Path
) -> None:
    """The exported snippet's BeginBlock goes on `features.2.0.block.3`, as PopTorch's stage
    manager meets it, and the config the fake rebuilds from the blocks is the one exported."""
    from test_knobs_honoured import assert_same_knobs, seen_by_poptorch

    p = Problem(
        "efficientnet_b0", 2, input_shape=(3, 32, 32), num_classes=10, optimizer="adamw", ipus=4
    )
    c = Config(
        precision="16.16",
        ipus_per_replica=4,
        gradient_accumulation=8,
        splits=("features.2.0.block.3", "features.3.1", "features.5.0.block.3"),
    )
    assert violations(p, c, profile_for(p).module_order) == []
    assert_same_knobs(
        c, seen_by_poptorch(poptorch, p, c, tmp_path), "efficientnet in-block splits"
    )


def test_the_mk1_layout_on_three_ipus_compiles_on_hardware_with_auto_round(
    poptorch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three IPUs: the snippet asks PopTorch to round up (autoRoundNumIPUs), without which it
    refuses the count on hardware; its second BeginBlock goes on a batch norm inside
    features.3.1."""
    import torch

    from ipu_autotune.backends.poptorch import child
    from ipu_autotune.export.python import render_snippet
    from ipu_autotune.models.zoo import build_model

    point = POINTS["M24"]
    p = dataclasses.replace(
        Problem.from_dict(point["problem"]), input_shape=(3, 32, 32), num_classes=10
    )
    c = Config.from_dict(point["config"])
    assert violations(p, c, profile_for(p).module_order) == []
    assert (
        violations(dataclasses.replace(p, ipus=3), c, profile_for(p).module_order) != []
    )  # 4 must exist
    monkeypatch.setenv("FAKE_POPTORCH_IPUS", "4")
    source = render_snippet(p, c)
    assert "opts.autoRoundNumIPUs(True)" in source

    def compile_on_hardware(snippet: str) -> Any:
        ns: dict[str, Any] = {}
        exec(snippet, ns)
        model = ns["TrainingModel"](build_model(p.model, p.num_classes, device="cpu"))
        opts = child.add_tuner_options(
            ns["make_options"](), poptorch, {"report_dir": str(tmp_path / "r")}, p, hardware=True
        )
        training = poptorch.trainingModel(model, opts, ns["make_optimizer"](model))
        training.compile(*child.host_batch(p, c, ns.get("INPUT_DTYPE", torch.float)))
        return training.fake_record["config"]

    assert compile_on_hardware(source).splits == c.splits
    with pytest.raises(poptorch.Error, match="power of two"):
        compile_on_hardware(source.replace("opts.autoRoundNumIPUs(True)", "pass"))


# --- must show 2: the search proposes in-block splits where blocks are large ---------------------


@pytest.mark.slow
def test_a_60_trial_efficientnet_study_that_needs_4_ipus_proposes_in_block_splits_and_one_compiles(
    poptorch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """EfficientNet-B0 at micro-batch 60, 224x224, on 4 Mk2 IPUs: no 1- or 2-IPU layout fits.
    The space draws splits inside the large MBConv blocks (features.2.x: 38% of the saved
    activations); the best's snippet, as tune exported it, compiles on the fake PopTorch with
    its BeginBlock on each submodule, and `export` writes the same splits."""
    import torch

    from ipu_autotune.backends.poptorch import child
    from ipu_autotune.models.zoo import build_model

    out, db = tmp_path / "out", f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert (
        main(
            [
                "efficientnet_b0",
                "--batch-size",
                "60",
                "--image-size",
                "224",
                "--ipus",
                "4",
                "--trials",
                "60",
                "--seed",
                "0",
                "--no-numerics",
                "--backend",
                "estimate",
                "--storage",
                db,
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    best = Config.from_dict(json.loads(capsys.readouterr()[0])["best"]["config"], "best")
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    in_block = [t for t in trials if any(".block." in s for s in t["config"]["splits"])]
    assert len(in_block) >= 5, "the space proposes splits inside MBConv blocks"
    assert all(
        t["config"]["ipus_per_replica"] == 4 for t in trials if t["measurement"]["feasible"]
    )
    assert any(".block." in s for s in best.splits), best.splits

    ns: dict[str, Any] = {}
    exec((out / "best_options.py").read_text(), ns)
    p = Problem("efficientnet_b0", 60, input_shape=(3, 224, 224), num_classes=1000, ipus=4)
    model = ns["TrainingModel"](build_model("efficientnet_b0", 1000, device="cpu"))
    opts = ns["make_options"]()
    child.add_tuner_options(
        opts,
        poptorch,
        {"report_dir": str(tmp_path / "r"), "cache_dir": str(tmp_path / "c")},
        p,
        hardware=False,
    )
    training = poptorch.trainingModel(model, opts, ns["make_optimizer"](model))
    training.compile(*child.host_batch(p, best, ns.get("INPUT_DTYPE", torch.float)))
    assert training.fake_record["config"].splits == best.splits

    assert (
        main(
            [
                "export",
                "--storage",
                db,
                "--study",
                "efficientnet_b0-bs60-4ipu-mk2-3x224x224",
                "--format",
                "python",
            ]
        )
        == 0
    )
    exported = capsys.readouterr()[0]
    assert all(
        f'model.get_submodule("{s}")' in exported or f"model.get_submodule('{s}')" in exported
        for s in best.splits
    ), exported[:2000]
