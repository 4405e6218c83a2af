"""The samples `verify` trains on: read once from `--data`, a held-out part for the curves, and
one fixed order of training samples that every run takes its batches from (same data order)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import UsageError
from ..host.measure import load
from ..numerics.running import first_line, logits

#: samples the loss and accuracy curves are measured on (held out: never trained on)
EVAL_SAMPLES = 256
#: the pool of samples kept in memory; more is refused with the fix (--samples)
POOL_BYTES = 2 << 30


@dataclass
class Samples:
    inputs: torch.Tensor  # training pool
    labels: torch.Tensor
    eval_inputs: torch.Tensor
    eval_labels: torch.Tensor

    @property
    def size(self) -> int:
        return int(self.inputs.shape[0])

    def order(self, seed: int) -> Iterator[int]:
        """Sample indices epoch after epoch, each epoch a permutation drawn from `seed`."""
        gen = torch.Generator().manual_seed(seed)
        while True:
            yield from torch.randperm(self.size, generator=gen).tolist()

    def batches(self, seed: int, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self.order(seed)
        while True:
            idx = torch.tensor([next(order) for _ in range(size)])
            yield self.inputs[idx], self.labels[idx]


def _items(data: Any) -> Iterator[Any]:
    if (
        hasattr(data, "__getitem__")
        and hasattr(data, "__len__")
        and not hasattr(data, "batch_size")
    ):
        return (data[i] for i in range(len(data)))
    return iter(data)


def _split(item: object) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) with a batch dimension, from a sample or a batch."""
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise UsageError(f"each item must be an (inputs, labels) pair, got {type(item).__name__}")
    x, y = (torch.as_tensor(t) for t in item)
    if y.dim() == 0:  # one sample
        return x.unsqueeze(0), y.unsqueeze(0)
    return x, y


def read_samples(spec: str, wanted: int, eval_samples: int = EVAL_SAMPLES) -> Samples:
    """Up to `wanted` training samples and `eval_samples` held-out ones from `--data` (first the
    held-out ones, in the loader's order). Fewer training samples are cycled through in epochs."""
    data = load(spec)
    xs, ys, count, per_sample = [], [], 0, 0
    try:
        for item in _items(data):
            x, y = _split(item)
            if not x.is_floating_point():
                x = x.float()
            xs.append(x)
            ys.append(y.long())
            count += int(x.shape[0])
            per_sample = x[0].numel() * 4
            if count * per_sample > POOL_BYTES:
                raise UsageError(
                    f"--data '{spec}': {count:,} samples of {per_sample:,} bytes exceed the "
                    f"{POOL_BYTES >> 30} GiB verify keeps in memory; lower --samples or --steps"
                )
            if count >= wanted + eval_samples:
                break
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"--data '{spec}': reading samples failed: {first_line(exc)}") from None
    if not xs:
        raise UsageError(f"--data '{spec}' gave no samples")
    inputs, labels = torch.cat(xs), torch.cat(ys)
    held = min(eval_samples, inputs.shape[0] // 5)  # at least four fifths to train on
    if held < 1:
        raise UsageError(
            f"--data '{spec}' gave {inputs.shape[0]} samples; verify needs at least 5"
        )
    return Samples(
        inputs[held : held + wanted], labels[held : held + wanted], inputs[:held], labels[:held]
    )


#: a warning when the labels use at most this share of the declared classes
FEW_CLASSES = 0.5


def check_samples(
    samples: Samples, spec: str, num_classes: int, build: Callable[[], nn.Module]
) -> list[str]:
    """Bad data is bad input (UsageError, before any run): labels outside 0..num_classes-1, one
    class only, a batch the model cannot take or whose logits have too few classes. Returns the
    warnings: labels that use few of the declared classes."""
    labels = torch.cat([samples.labels, samples.eval_labels])
    if labels.dim() != 1:
        raise UsageError(
            f"--data '{spec}': labels of shape {list(labels.shape)}; verify needs one class index "
            "per sample (not one-hot)"
        )
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= num_classes:
        raise UsageError(
            f"--data '{spec}': labels run {lo}..{hi}, outside the {num_classes:,} classes of "
            f"--num-classes {num_classes}; give --num-classes {hi + 1} or labels "
            f"0..{num_classes - 1}"
        )
    used = int(torch.unique(labels).numel())
    if used < 2:
        raise UsageError(
            f"--data '{spec}': every label is {lo}: one class only, nothing to learn; give data "
            "with at least two classes"
        )
    x = samples.inputs[:2]
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            out = logits(build().eval()(x))
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(
            f"--data '{spec}': the model cannot take its batches (one sample: shape "
            f"{list(x.shape[1:])}, {x.dtype}): {first_line(exc)}; check --input-shape and the "
            "data"
        ) from None
    if out.dim() != 2 or out.shape[0] != x.shape[0] or out.shape[1] <= hi:
        raise UsageError(
            f"--data '{spec}': the model returns logits of shape {list(out.shape)} for a batch of "
            f"{x.shape[0]}; verify needs (batch, classes) with more than {hi} classes"
        )
    if used <= FEW_CLASSES * num_classes:
        return [
            f"the labels use {used:,} of the {num_classes:,} classes (--num-classes "
            f"{num_classes}): give --num-classes {hi + 1} if that is all there are; a loss over "
            "unused classes starts higher and falls for the wrong reason"
        ]
    return []
