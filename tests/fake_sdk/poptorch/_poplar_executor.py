"""trainingModel and PoplarExecutor (`python/__init__.py`, `python/_poplar_executor.py`).

trainingModel wraps the user's model in place (a second wrap raises RuntimeError), freezes
the user's Options and works on a clone. compile() hands everything to the fake device,
which raises like PopTorch (OOM as poptorch.Error "popart_exception") or returns a verdict.
"""

from __future__ import annotations

import datetime
import time

import torch

from . import _fake_device, enums, optim
from ._impl import createPoptorchError, isWrapped
from .options import Options


class PoplarExecutor:
    def __init__(self, model, options, training, optimizer, user_model):
        self._model = model
        self._user_model = user_model
        self._options = options
        self._training = training
        self._optimizer = optimizer
        self._verdict = None
        self._attached = False
        self._compile_time = None
        #: what the fake compiler understood (problem, config, measurement): for tests
        self.fake_record = {}

    # compile and run
    def compile(self, *args, **kwargs) -> None:
        if self._verdict is not None:
            return  # a second call only warns in PopTorch
        start = time.perf_counter()
        self._verdict = _fake_device.compile_model(
            self._user_model, self._options, self._optimizer, args, self.fake_record
        )
        self._compile_time = datetime.timedelta(seconds=time.perf_counter() - start)
        if self._options.connection_type != enums.ConnectionType.Never:
            self._attached = True  # compile also loads the engine when not offline

    def __call__(self, *args, **kwargs):
        if self._verdict is None:
            self.compile(*args, **kwargs)
        assert self._options.connection_type != enums.ConnectionType.Never, (
            "Trying to run a model compiled offline (ConnectionType.Never): it cannot be run"
        )
        if not self._attached:
            self.attachToDevice()
        limit = float(__import__("os").environ.get("FAKE_POPTORCH_MAX_CALL_S", "0.25"))
        time.sleep(min(self._verdict.seconds_per_call, limit))
        problem = self._verdict.problem
        return torch.zeros(problem.batch_size, problem.num_classes), torch.zeros(())

    # state
    def isCompiled(self) -> bool:
        return self._verdict is not None

    def isAttachedToDevice(self) -> bool:
        return self._attached

    def attachToDevice(self) -> None:
        assert self._options.connection_type != enums.ConnectionType.Never, (
            "Trying to attach to an offline device (ConnectionType.Never)"
        )
        if not self.isCompiled():
            raise createPoptorchError("Model has not been compiled")
        self._attached = True

    def detachFromDevice(self) -> None:
        if not self.isCompiled():
            raise createPoptorchError("Model has not been compiled")
        if not self._attached:
            raise createPoptorchError("Device is not attached")
        self._attached = False

    def destroy(self) -> None:
        if not self.isCompiled():
            return  # as the real one: an uncompiled (e.g. OOM) model stays wrapped
        self._attached = False
        self._user_model.__class__ = self._user_model.__class__.__bases__[0]
        self._verdict = None

    def compilationTime(self) -> datetime.timedelta:
        if self._compile_time is None or not self._options._show_compilation_progress_bar:
            raise createPoptorchError(
                "compilationTime needs a compiled model and the progress bar"
            )
        return self._compile_time

    def copyWeightsToHost(self) -> None:
        pass

    def copyWeightsToDevice(self) -> None:
        pass

    def parameters(self, *args, **kwargs):
        return self._user_model.parameters(*args, **kwargs)


def _wrap_in_place(model: torch.nn.Module) -> None:
    cls = type(model)
    model.__class__ = type(f"Poptorch{cls.__name__}", (cls,), {"_poptorch_wrapped": True})


_TORCH_OPTIMIZERS = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop)


def trainingModel(model, options=None, optimizer=None) -> PoplarExecutor:
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    if isWrapped(model):
        raise RuntimeError(
            "Model has already been wrapped in 'poptorch.trainingModel'. Call "
            "model.destroy() on the model to unwrap before wrapping again."
        )
    options = options if options is not None else Options()
    assert isinstance(options, Options), f"options must be a poptorch.Options, got {type(options)}"
    if optimizer is None:
        optimizer = optim.SGD(model.parameters(), lr=0.01)
    if not isinstance(optimizer, (optim.Optimizer, *_TORCH_OPTIMIZERS)):
        raise createPoptorchError(f"Unsupported optimizer {type(optimizer).__name__}")
    options._freeze()
    clone = options.clone()
    if clone.defaultOutputMode():
        clone.outputMode(enums.OutputMode.Final)  # training's default
    _wrap_in_place(model)
    return PoplarExecutor(model, clone, True, optimizer, model)
