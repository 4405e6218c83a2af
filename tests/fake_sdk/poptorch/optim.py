"""poptorch.optim (`python/optim.py`): torch optimizers with the IPU-specific keyword arguments.

Same signatures (every argument but `params`, and SGD's `lr`, defaults to None) and the same
asserts: accumulation types fp16 or fp32 only; LAMB and RMSprop take no `max_grad_norm`
(a TypeError, as from any unknown keyword).
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

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
        momentum: Optional[float] = None,
        dampening: Optional[float] = None,
        weight_decay: Optional[float] = None,
        nesterov: Optional[bool] = None,
        maximize: Optional[bool] = None,
        foreach: Optional[bool] = None,
        differentiable: Optional[bool] = None,
        loss_scaling: Optional[float] = None,
        velocity_scaling: Optional[float] = None,
        use_combined_accum: Optional[bool] = None,
        accum_type: Optional[torch.dtype] = None,
        velocity_accum_type: Optional[torch.dtype] = None,
        max_grad_norm: Optional[float] = None,
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
        lr: Optional[float] = None,
        betas: Optional[Tuple[float, float]] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        amsgrad: Optional[bool] = None,
        foreach: Optional[bool] = None,
        maximize: Optional[bool] = None,
        capturable: Optional[bool] = None,
        differentiable: Optional[bool] = None,
        fused: Optional[bool] = None,
        loss_scaling: Optional[float] = None,
        accum_type: Optional[torch.dtype] = None,
        first_order_momentum_accum_type: Optional[torch.dtype] = None,
        second_order_momentum_accum_type: Optional[torch.dtype] = None,
        max_grad_norm: Optional[float] = None,
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
        lr: Optional[float] = None,
        betas: Optional[Tuple[float, float]] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        amsgrad: Optional[bool] = None,
        maximize: Optional[bool] = None,
        foreach: Optional[bool] = None,
        capturable: Optional[bool] = None,
        differentiable: Optional[bool] = None,
        fused: Optional[bool] = None,
        loss_scaling: Optional[float] = None,
        bias_correction: Optional[bool] = None,
        accum_type: Optional[torch.dtype] = None,
        first_order_momentum_accum_type: Optional[torch.dtype] = None,
        second_order_momentum_accum_type: Optional[torch.dtype] = None,
        max_grad_norm: Optional[float] = None,
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
        lr: Optional[float] = None,
        alpha: Optional[float] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        momentum: Optional[float] = None,
        centered: Optional[bool] = None,
        foreach: Optional[bool] = None,
        maximize: Optional[bool] = None,
        differentiable: Optional[bool] = None,
        loss_scaling: Optional[float] = None,
        accum_type: Optional[torch.dtype] = None,
        first_order_momentum_accum_type: Optional[torch.dtype] = None,
        second_order_momentum_accum_type: Optional[torch.dtype] = None,
        use_tf_variant: Optional[bool] = None,
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
        lr: Optional[float] = None,
        betas: Tuple[float, float] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        bias_correction: Optional[bool] = None,
        loss_scaling: Optional[float] = None,
        max_weight_norm: Optional[float] = None,
        accum_type: Optional[torch.dtype] = None,
        first_order_momentum_accum_type: Optional[torch.dtype] = None,
        second_order_momentum_accum_type: Optional[torch.dtype] = None,
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
