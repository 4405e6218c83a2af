"""poptorch.optim (`python/optim.py`): torch optimizers with the IPU-specific keyword arguments.

Same signatures (every argument but `params`, and SGD's `lr`, defaults to None) and the same
asserts: accumulation types fp16 or fp32 only; LAMB and RMSprop take no `max_grad_norm`
(a TypeError, as from any unknown keyword).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

_SUPPORTED = (torch.float16, torch.float32)
_ERR = "Accumulation types must be either torch.float32 or torch.float16"


def _parent_args(**kwargs):
    """Arguments left at None keep torch's default (the real _parseArgs does the same)."""
    return {k: v for k, v in kwargs.items() if v is not None}


class Optimizer:
    """Mixin marking a PopTorch optimizer."""

    def _set_accum_types(self, **types):
        for name, value in types.items():
            value = torch.float32 if value is None else value
            assert value in _SUPPORTED, _ERR
            setattr(self, name, value)


class SGD(Optimizer, torch.optim.SGD):
    def __init__(
        self,
        params: Iterable,
        lr: float,
        momentum: float | None = None,
        dampening: float | None = None,
        weight_decay: float | None = None,
        nesterov: bool | None = None,
        maximize: bool | None = None,
        foreach: bool | None = None,
        differentiable: bool | None = None,
        loss_scaling: float | None = None,
        velocity_scaling: float | None = None,
        use_combined_accum: bool | None = None,
        accum_type: torch.dtype | None = None,
        velocity_accum_type: torch.dtype | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        torch.optim.SGD.__init__(
            self,
            params,
            **_parent_args(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                maximize=maximize,
                foreach=foreach,
                differentiable=differentiable,
            ),
        )
        self.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
        self.use_combined_accum = bool(use_combined_accum)
        self.velocity_scaling = 1.0 if velocity_scaling is None else velocity_scaling
        self._set_accum_types(accum_type=accum_type, velocity_accum_type=velocity_accum_type)
        self.max_grad_norm = float("inf") if max_grad_norm is None else max_grad_norm


class Adam(Optimizer, torch.optim.Adam):
    def __init__(
        self,
        params: Iterable,
        lr: float | None = None,
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        amsgrad: bool | None = None,
        foreach: bool | None = None,
        maximize: bool | None = None,
        capturable: bool | None = None,
        differentiable: bool | None = None,
        fused: bool | None = None,
        loss_scaling: float | None = None,
        accum_type: torch.dtype | None = None,
        first_order_momentum_accum_type: torch.dtype | None = None,
        second_order_momentum_accum_type: torch.dtype | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        assert not amsgrad, "AMSGrad is currently not supported"
        torch.optim.Adam.__init__(
            self,
            params,
            **_parent_args(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                foreach=foreach,
                maximize=maximize,
                capturable=capturable,
                differentiable=differentiable,
                fused=fused,
            ),
        )
        self.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
        self._set_accum_types(
            accum_type=accum_type,
            first_order_momentum_accum_type=first_order_momentum_accum_type,
            second_order_momentum_accum_type=second_order_momentum_accum_type,
        )
        self.max_grad_norm = float("inf") if max_grad_norm is None else max_grad_norm


class AdamW(Optimizer, torch.optim.AdamW):
    def __init__(
        self,
        params: Iterable,
        lr: float | None = None,
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        amsgrad: bool | None = None,
        maximize: bool | None = None,
        foreach: bool | None = None,
        capturable: bool | None = None,
        differentiable: bool | None = None,
        fused: bool | None = None,
        loss_scaling: float | None = None,
        bias_correction: bool | None = None,
        accum_type: torch.dtype | None = None,
        first_order_momentum_accum_type: torch.dtype | None = None,
        second_order_momentum_accum_type: torch.dtype | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        assert not amsgrad, "AMSGrad is currently not supported"
        torch.optim.AdamW.__init__(
            self,
            params,
            **_parent_args(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                maximize=maximize,
                foreach=foreach,
                capturable=capturable,
                differentiable=differentiable,
                fused=fused,
            ),
        )
        self.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
        self.bias_correction = True if bias_correction is None else bias_correction
        self._set_accum_types(
            accum_type=accum_type,
            first_order_momentum_accum_type=first_order_momentum_accum_type,
            second_order_momentum_accum_type=second_order_momentum_accum_type,
        )
        self.max_grad_norm = float("inf") if max_grad_norm is None else max_grad_norm


class RMSprop(Optimizer, torch.optim.RMSprop):
    def __init__(
        self,
        params: Iterable,
        lr: float | None = None,
        alpha: float | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        momentum: float | None = None,
        centered: bool | None = None,
        foreach: bool | None = None,
        maximize: bool | None = None,
        differentiable: bool | None = None,
        loss_scaling: float | None = None,
        accum_type: torch.dtype | None = None,
        first_order_momentum_accum_type: torch.dtype | None = None,
        second_order_momentum_accum_type: torch.dtype | None = None,
        use_tf_variant: bool | None = None,
    ) -> None:
        torch.optim.RMSprop.__init__(
            self,
            params,
            **_parent_args(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                foreach=foreach,
                maximize=maximize,
                differentiable=differentiable,
            ),
        )
        self.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
        self.use_tf_variant = bool(use_tf_variant)
        self._set_accum_types(
            accum_type=accum_type,
            first_order_momentum_accum_type=first_order_momentum_accum_type,
            second_order_momentum_accum_type=second_order_momentum_accum_type,
        )


class LAMB(Optimizer, torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable,
        lr: float | None = None,
        betas: tuple[float, float] = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        bias_correction: bool | None = None,
        loss_scaling: float | None = None,
        max_weight_norm: float | None = None,
        accum_type: torch.dtype | None = None,
        first_order_momentum_accum_type: torch.dtype | None = None,
        second_order_momentum_accum_type: torch.dtype | None = None,
    ) -> None:
        defaults = dict(
            lr=1e-3 if lr is None else lr,
            betas=(0.9, 0.999) if betas is None else betas,
            eps=1e-8 if eps is None else eps,
            weight_decay=1e-2 if weight_decay is None else weight_decay,
            bias_correction=True if bias_correction is None else bias_correction,
        )
        torch.optim.Optimizer.__init__(self, params, defaults)
        self.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
        self.max_weight_norm = 65500.0 if max_weight_norm is None else max_weight_norm
        self._set_accum_types(
            accum_type=accum_type,
            first_order_momentum_accum_type=first_order_momentum_accum_type,
            second_order_momentum_accum_type=second_order_momentum_accum_type,
        )

    def step(self, closure=None):
        raise NotImplementedError("LAMB steps on the IPU only")


__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "LAMB"]
