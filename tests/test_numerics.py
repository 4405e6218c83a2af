"""Numerics advice: loss scale, stochastic rounding and partials from a model's own gradients.

Figures are checked against independent computations: FP16 casts of fresh gradients, and
real torch.optim steps applied to FP16 weights, never the module's own histograms.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from numerics_models import BareMatmul, ScaledMLP, SmallCNN
from rich.console import Console
from testing import NUMERICS_CNN_SGD as PROBLEM, not_none
from torch import nn
from torch.nn import functional as F

from ipu_autotune import cli
from ipu_autotune.numerics.advice import advise
from ipu_autotune.numerics.answer import (
    LossScaleAdvice,
    NumericsAdvice,
    PartialsAdvice,
    StochasticRoundingAdvice,
    summary_lines,
)
from ipu_autotune.numerics.data import synthetic_batches
from ipu_autotune.numerics.loss_scale import DRIFT_BINADES, loss_scale_table, recommend_loss_scale
from ipu_autotune.numerics.partials import PARTIALS_RANGE_LIMIT, partials_advice
from ipu_autotune.numerics.statistics import collect_gradient_stats
from ipu_autotune.numerics.stochastic_rounding import SR_THRESHOLD, stochastic_rounding_advice
from ipu_autotune.numerics.view import render
from ipu_autotune.problem import Config, Problem

FP16_MAX = 65504.0
TINY = 2.0**-24  # smallest FP16 subnormal


def batches(n: int, shape: Any = (48,), batch: int = 16, classes: int = 10, seed: int = 0) -> Any:
    gen = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(batch, *shape, generator=gen),
            torch.randint(0, classes, (batch,), generator=gen),
        )
        for _ in range(n)
    ]


def fresh_param_grads(model: nn.Module, data: Any, loss_fn: Any = F.cross_entropy) -> torch.Tensor:
    """All parameter gradients of one batch, flattened, on a copy of the model."""
    model = copy.deepcopy(model).train()
    x, y = data
    loss_fn(model(x), y).backward()
    return torch.cat([not_none(p.grad).reshape(-1) for p in model.parameters()])


def seeded(cls: Any, *args: Any, **kwargs: Any) -> Any:
    torch.manual_seed(0)
    return cls(*args, **kwargs)


# --- loss scaling --------------------------------------------------------------------------------


def test_tiny_gradients_get_a_large_scale_that_keeps_them() -> None:
    model = seeded(ScaledMLP, scale=1e-5)
    stats = collect_gradient_stats(model, batches(3), optimizer="sgd", lr=0.01)
    advice = recommend_loss_scale(stats)
    assert advice.underflow_at_1 > 0.5 and advice.underflow_at_scale < 0.01
    assert advice.overflow_free and not advice.auto

    # On gradients of a batch the statistics never saw, cast to FP16 as PopTorch would.
    g = fresh_param_grads(model, batches(1, seed=7)[0])
    g = g[g != 0]
    assert (g.half() == 0).float().mean() > 0.5  # FP16 flushes most of them at scale 1
    scaled = g * advice.scale
    assert (scaled.half() == 0).float().mean() < 0.01
    assert (scaled.abs() < TINY).float().mean() < 0.01  # nor are they rounded up to 2^-24
    assert scaled.half().isfinite().all()


def test_large_gradients_get_a_small_scale_that_never_overflows() -> None:
    model = seeded(ScaledMLP)

    def big_loss(out: Any, y: Any) -> Any:
        return F.cross_entropy(out, y) * 5000  # e.g. a sum over a big batch

    stats = collect_gradient_stats(model, batches(3), loss_fn=big_loss, optimizer="sgd", lr=1e-6)
    advice = recommend_loss_scale(stats)
    assert stats.max_abs_grad > 100
    assert 1 <= advice.scale <= 4 and advice.overflow_free
    for seed in range(1, 6):
        g = fresh_param_grads(model, batches(1, seed=seed)[0], big_loss)
        assert g.abs().max() * advice.scale <= FP16_MAX
        assert (g * advice.scale).half().isfinite().all()


def test_table_is_exact_against_fp16_thresholds() -> None:
    model = seeded(BareMatmul)  # no Linear/Conv: the statistics hold exactly the weight gradient
    x, y = batches(1, shape=(64,))[0]
    data = [(x * torch.logspace(-14, 0, 64), y)]  # spread the gradients over ~47 binades
    stats = collect_gradient_stats(model, data, steps=1, optimizer="sgd", lr=0.01)
    g = fresh_param_grads(model, data[0])
    g = g[g != 0]
    n = g.numel()
    rows = loss_scale_table(stats)
    assert 0.2 < rows[0].flushed < 0.8  # the check below covers both sides of each threshold
    for row in rows:
        scaled = (g * row.scale).abs()
        assert row.flushed * n == pytest.approx(int((scaled < TINY).sum()), abs=1e-6)
        assert row.subnormal * n == pytest.approx(
            int(((scaled >= TINY) & (scaled < 2.0**-14)).sum()), abs=1e-6
        )
        assert row.overflow == bool(scaled.max() > FP16_MAX)


def test_drifting_gradients_ask_for_automatic_loss_scaling() -> None:
    model = seeded(ScaledMLP)
    steady = collect_gradient_stats(model, batches(3), optimizer="sgd", lr=1e-4)
    assert steady.drift_binades() <= DRIFT_BINADES and not recommend_loss_scale(steady).auto
    growing = [(x * 10.0**i, y) for i, (x, y) in enumerate(batches(3))]  # inputs 1x, 10x, 100x
    stats = collect_gradient_stats(model, growing, optimizer="sgd", lr=1e-6)
    advice = recommend_loss_scale(stats)
    assert stats.drift_binades() > DRIFT_BINADES
    assert advice.auto and "binades" in advice.reason


# --- stochastic rounding -------------------------------------------------------------------------


def simulated_lost_fraction(model: nn.Module, data: Any, optimizer: str, lr: float) -> float:
    """One real torch.optim step in float64 (the exact intended update), applied to the FP16
    weights with round-to-nearest: the share of non-zero updates that leave the weight
    unchanged."""
    ref = copy.deepcopy(model).double().train()
    before = [p.detach().clone() for p in ref.parameters()]
    optimizers: dict[str, Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]] = {
        "sgd": lambda ps: torch.optim.SGD(ps, lr=lr, momentum=0.9),
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=lr, weight_decay=0.01),
        "adam": lambda ps: torch.optim.Adam(ps, lr=lr),
    }
    opt = optimizers[optimizer](ref.parameters())
    x, y = data
    F.cross_entropy(ref(x.double()), y).backward()
    opt.step()
    lost = changed = 0
    for p0, p1, p32 in zip(before, ref.parameters(), model.parameters(), strict=True):
        u = p1.detach() - p0
        w16 = p32.detach().half()
        same = (w16.double() + u).half() == w16
        nonzero = u != 0
        lost += int((same & nonzero).sum())
        changed += int(nonzero.sum())
    return lost / changed


@pytest.mark.parametrize("optimizer, lr", [("sgd", 0.01), ("adamw", 3e-5), ("adam", 2e-5)])
def test_stochastic_rounding_estimate_matches_a_direct_simulation(
    optimizer: str, lr: float
) -> None:
    model = seeded(ScaledMLP)
    data = batches(1)
    stats = collect_gradient_stats(model, data, steps=1, optimizer=optimizer, lr=lr)
    advice = stochastic_rounding_advice(stats)
    simulated = simulated_lost_fraction(model, data[0], optimizer, lr)
    assert 0.05 < simulated < 0.95  # an informative case, not all or nothing
    assert advice.fraction_lost == pytest.approx(simulated, abs=0.03)
    assert advice.recommend == (simulated > SR_THRESHOLD)
    # Another learning rate from the same statistics (updates are proportional to lr).
    other = lr * 3.7
    assert stochastic_rounding_advice(stats, lr=other).fraction_lost == pytest.approx(
        simulated_lost_fraction(model, data[0], optimizer, other), abs=0.03
    )


def test_stochastic_rounding_off_when_updates_are_large() -> None:
    model = seeded(ScaledMLP)
    stats = collect_gradient_stats(model, batches(2), optimizer="adam", lr=1e-2)
    advice = stochastic_rounding_advice(stats)
    assert advice.fraction_lost < SR_THRESHOLD and not advice.recommend
    with pytest.raises(ValueError):
        stochastic_rounding_advice(stats, optimizer="adamw")


def test_collection_leaves_the_model_as_it_was() -> None:
    model = seeded(SmallCNN)
    state = copy.deepcopy(model.state_dict())
    model.eval()
    collect_gradient_stats(model, batches(2, shape=(3, 8, 8)), optimizer="adamw", lr=0.1)
    partials_advice(model, torch.randn(4, 3, 8, 8))
    assert not model.training
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


# --- partials ------------------------------------------------------------------------------------


class Branches(nn.Module):
    """Three Linear layers on slices of one input: long with large activations, long and coherent
    (an average of positive inputs), and small."""

    def __init__(self) -> None:
        super().__init__()
        self.long_large = nn.Linear(32768, 4)
        self.coherent = nn.Linear(16384, 1, bias=False)
        nn.init.constant_(self.coherent.weight, 1 / 16384)
        self.small = nn.Linear(64, 10)

    def forward(self, x: Any) -> Any:
        return (
            self.long_large(x[:, :32768] * 300).sum(1)
            + self.coherent(x[:, :16384]).sum(1)
            + self.small(x[:, :64] - 0.5).sum(1)
        )


def test_partials_flag_long_accumulations_with_large_or_coherent_sums_only() -> None:
    model = seeded(Branches)
    x = torch.rand(
        4, 32768, generator=torch.Generator().manual_seed(0)
    )  # positive, like post-ReLU
    advice = partials_advice(model, x)
    assert advice.recommend == "float"
    assert advice.risky_layers == ["long_large", "coherent"]
    assert "long_large" in advice.reason
    # The largest partial sum is checked against the layer itself, not the module's own sums.
    bound = (x[:, :32768] * 300).abs() @ model.long_large.weight.abs().T
    assert bound.max() > PARTIALS_RANGE_LIMIT
    small = partials_advice(seeded(nn.Sequential, nn.Linear(64, 10)), torch.randn(8, 64))
    assert small.recommend == "half" and small.risky_layers == []
    cnn = partials_advice(seeded(SmallCNN), torch.randn(4, 3, 16, 16))
    assert cnn.recommend == "half"


# --- the whole advice ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def advice() -> Any:
    return advise(PROBLEM, steps=2)


def test_advice_round_trips_through_json(advice: Any) -> None:
    data = json.loads(json.dumps(advice.to_dict()))
    assert NumericsAdvice.from_dict(data) == advice
    assert [row.scale for row in advice.table] == [2.0**k for k in range(25)]
    assert advice.lr == pytest.approx(0.1 * 8 / 256)


def test_apply_sets_fields_only_on_fp16_configs(advice: Any) -> None:
    chosen = NumericsAdvice(
        loss_scale=LossScaleAdvice(256.0, True, 0.4, 0.001, True, "drift"),
        stochastic_rounding=StochasticRoundingAdvice(0.2, True, "lost"),
        partials=PartialsAdvice("half", [], "fine"),
        table=advice.table,
    )
    fp32 = Config(precision="32.32", loss_scaling=128.0, partials="float")
    assert chosen.apply(fp32) == fp32.replace(loss_scaling=1.0)
    assert chosen.apply(Config()) == Config()
    mixed = chosen.apply(Config(precision="16.32"))
    assert (mixed.loss_scaling, mixed.partials, mixed.stochastic_rounding) == (
        256.0,
        "half",
        False,
    )
    half = chosen.apply(Config(precision="16.16"))
    assert (half.loss_scaling, half.partials, half.stochastic_rounding) == ("auto", "half", True)
    fixed = NumericsAdvice.from_dict(
        {**chosen.to_dict(), "loss_scale": {**chosen.to_dict()["loss_scale"], "auto": False}}
    )
    assert fixed.apply(Config(precision="16.16")).loss_scaling == 256.0


def test_summary_and_view_state_the_reasons(advice: Any) -> None:
    lines = summary_lines(advice)
    assert len(lines) == 3
    assert lines[0].startswith(("loss scale ", "loss scaling auto"))
    assert "of non-zero gradients representable in FP16" in lines[0]
    assert lines[1].startswith("stochastic rounding ") and "half an ulp" in lines[1]
    assert lines[2].startswith("partials ")
    console = Console(width=140, record=True)
    console.print(render(advice))
    text = console.export_text()
    assert "lost (<2^-24)" in text and "stochastic rounding" in text and "←" in text


@pytest.mark.slow
def test_advise_resnet18_leaves_global_state_alone() -> None:
    threads, rng = torch.get_num_threads(), torch.random.get_rng_state()
    advice = advise(Problem("resnet18", 4, input_shape=(3, 32, 32), num_classes=10), steps=2)
    assert torch.get_num_threads() == threads and torch.equal(torch.random.get_rng_state(), rng)
    assert advice.loss_scale.scale in [2.0**k for k in range(25)]
    assert 0 <= advice.stochastic_rounding.fraction_lost <= 1
    assert advice.batch_used == 4 and advice.optimizer == "adamw" and advice.lr == 1e-3


def test_synthetic_batches_cap_the_batch() -> None:
    got = synthetic_batches(
        Problem("resnet18", 64, input_shape=(3, 8, 8), num_classes=5), 2, seed=3
    )
    assert len(got) == 2 and got[0][0].shape == (16, 3, 8, 8)
    assert int(got[0][1].min()) >= 0 and int(got[0][1].max()) < 5
    again = synthetic_batches(
        Problem("resnet18", 64, input_shape=(3, 8, 8), num_classes=5), 2, seed=3
    )
    assert torch.equal(got[1][0], again[1][0])


# --- command line --------------------------------------------------------------------------------


def test_cli_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "numerics",
            "numerics_models:small_cnn",
            "-b",
            "8",
            "--input-shape",
            "3,16,16",
            "--num-classes",
            "10",
            "--optimizer",
            "adam",
            "--steps",
            "2",
            "--data",
            "numerics_models:fixed_batches",
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert data["optimizer"] == "adam" and data["steps"] == 2 and data["batch_used"] == 8
    assert data["partials"]["recommend"] in ("half", "float")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "no_such_module:fn"], "cannot import"),
        (["--data", "numerics_models:not_batches"], "(inputs, labels)"),
        (["--data", "numerics_models"], "package.module:function"),
        (["--lr", "-1"], "must be positive"),
        (["--input-shape", "3,16"], "check --input-shape"),
    ],
)
def test_cli_bad_input_is_a_one_line_usage_error(
    capsys: pytest.CaptureFixture[str], args: list[Any], message: str
) -> None:
    code = cli.main(
        [
            "numerics",
            "numerics_models:small_cnn",
            "-b",
            "8",
            "--num-classes",
            "10",
            *(["--input-shape", "3,16,16"] if "--input-shape" not in args else []),
            *args,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_a_torchvision_models_advice_is_measured_once_a_process_and_a_users_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each `estimate` and new study asks for the advice; a torchvision model's on synthetic
    batches depends only on the problem and the arguments, so a process measures it once. A
    user's module:factory may have changed since, and is measured again."""
    from ipu_autotune.numerics import advice as advice_module

    runs = []

    def counted(*a: Any, **k: Any) -> Any:  # the advice's own, counted
        runs.append(1)
        return collect_gradient_stats(*a, **k)

    monkeypatch.setattr(advice_module, "collect_gradient_stats", counted)
    problem = Problem("resnet18", 4, input_shape=(3, 16, 16), num_classes=7)
    first = advise(problem, steps=2, seed=5)
    first.table.clear()  # the caller's copy: the next answer is not changed by it
    again = advise(problem, steps=2, seed=5)
    assert len(runs) == 1 and again.table
    assert again == advise(problem, steps=2, seed=5) and len(runs) == 1
    advise(problem, steps=2, seed=6)  # another seed is another measurement
    assert len(runs) == 2
    user = Problem("numerics_models:small_cnn", 4, input_shape=(3, 16, 16), num_classes=10)
    advise(user, steps=1)
    advise(user, steps=1)
    assert len(runs) == 4
