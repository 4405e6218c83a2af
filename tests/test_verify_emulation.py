"""`verify`'s FP16 emulation (issue 60): every operation's result rounded, the ones written in
`forward` and autograd's backward ones included, so that overflow and NaN behave as torch's own
float16 does on the CPU; and what the run counts."""

from __future__ import annotations

import copy

import pytest
import torch
from testing import not_none
from torch import nn
from verify_models import AttentionBlock

from ipu_autotune.problem import Config
from ipu_autotune.verification import emulation

#: the block's q and k weights: at this spread about 1 % of its unscaled attention scores pass
#: 65504
QK_STD = 12.0


def _rates(block: AttentionBlock) -> tuple[float, float]:
    """(share of attention scores that are inf, share of softmax outputs that are NaN)."""
    return float(torch.isinf(block.scores.float()).float().mean()), float(
        torch.isnan(block.probs.float()).float().mean()
    )


def test_attention_written_in_forward_overflows_and_nans_as_torch_float16_does() -> None:
    torch.manual_seed(0)
    block = AttentionBlock(32, qk_std=QK_STD)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(emulation.to_fp16(p))  # the same weights for both
    x = emulation.to_fp16(torch.randn(16, 24, 32))
    half = copy.deepcopy(block).half()
    with torch.no_grad():
        out_half = half(x.half())
        with emulation.fp16_emulation():
            out_emulated = block(x)
    inf_ref, nan_ref = _rates(half)
    inf_em, nan_em = _rates(block)
    assert 0.002 < inf_ref < 0.05 and 0.02 < nan_ref < 0.5  # the case is one: overflow happens
    assert inf_em == pytest.approx(inf_ref, rel=0.1) and nan_em == pytest.approx(nan_ref, rel=0.1)
    assert float(torch.isnan(out_emulated).float().mean()) == pytest.approx(
        float(torch.isnan(out_half.float()).float().mean()), rel=0.1
    )
    # without the emulation: FP32 all through, nothing overflows
    with torch.no_grad():
        block(x)
    assert _rates(block) == (0.0, 0.0)


def test_the_backward_pass_is_rounded_and_counted() -> None:
    """Gradients below 2^-25 flush to zero in the backward operations themselves (a product
    written in forward, no module), and the count says so."""
    w = nn.Parameter(torch.full((4, 8), 1e-4))
    x = torch.full((2, 4), 1e-4)
    counts = emulation.RoundingCounts()
    with emulation.fp16_emulation(counts) as mode:
        y = (x @ w).sum()
        mode.counting = True
        y.backward(torch.tensor(1e-4))
    assert w.grad is not None and (w.grad == 0).all()  # 1e-4 x 1e-4 underflows in FP16
    assert counts.underflow > 0 and counts.nonzero > 0
    # in FP32 the same gradient is not zero
    w.grad = None
    (x @ w).sum().backward(torch.tensor(1e-4))
    assert w.grad is not None and (w.grad != 0).all()


def test_in_place_results_and_batch_norm_statistics_are_rounded() -> None:
    bn = nn.BatchNorm1d(3)
    x = torch.randn(8, 3) * 1e-3 + 1.0
    with torch.no_grad(), emulation.fp16_emulation():
        bn(x)
        t = torch.ones(3)
        t.add_(1e-4)  # below half an ulp of 1 in FP16
    mean, var = not_none(bn.running_mean), not_none(bn.running_var)  # tracked by default
    assert torch.equal(mean, emulation.to_fp16(mean))
    assert torch.equal(var, emulation.to_fp16(var))
    assert (t == 1).all()


def test_fp16_rounding_overflows_to_inf_and_underflows_to_zero_and_counts_them() -> None:
    before = torch.tensor([1e5, -7e4, 2.0**-26, 1e-3, 0.0, 65504.0])
    after = emulation.to_fp16(before)
    assert torch.isinf(after[:2]).all() and after[2] == 0 and after[3] != 0 and after[5] == 65504.0
    counts = emulation.RoundingCounts()
    counts.add(before, after)
    assert (counts.nonzero, counts.overflow, counts.underflow) == (5, 2, 1)


def test_verify_judges_such_a_model_diverged_in_fp16() -> None:
    """End to end: the same block on the digits (AttentionDigits), its FP32 recipe against 16.16.
    The leaf-module emulation this replaced trained it to "at parity" (0 % overflow)."""
    pytest.importorskip("sklearn")
    import ipu_autotune

    verdict = ipu_autotune.verify(
        "verify_models:attention_digits",
        batch_size=16,
        input_shape=(1, 8, 8),
        num_classes=10,
        optimizer="adamw",
        data="verify_models:digits",
        steps=60,
        tuned=Config(precision="16.16", loss_scaling=128.0, stochastic_rounding=True),
        quiet=True,
    )
    assert verdict.kind == "diverged", verdict.line()
    assert verdict.tuned.nonfinite_at is not None and verdict.runs[0].nonfinite_at is None
