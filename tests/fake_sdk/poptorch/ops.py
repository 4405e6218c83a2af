"""Pipeline annotations and checkpoints (`python/ops.py`): BeginBlock, removeBlocks,
recomputationCheckpoint."""

from __future__ import annotations

from collections import OrderedDict

import torch

from ._impl import createPoptorchError

#: set by the fake compiler while it probes hooks: how many checkpoints were taken
_checkpoint_calls: list[int] = []
#: (mode, factor) of every serializedMatMul the traced forward called, for the fake compiler
serialized_matmuls: list[tuple] = []


class _BlockHook:
    """The forward pre-hook BeginBlock registers; outside an IPU trace it does nothing."""

    def __init__(self, user_id, ipu_id) -> None:
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __call__(self, module, input):
        return None

    def __repr__(self):
        return f"BeginBlock(user_id={self._user_id}, ipu_id={self._ipu_id})"


def BeginBlock(
    layer_to_call: torch.nn.Module, user_id: str = None, ipu_id: int = None
) -> torch.nn.Module:
    if not isinstance(layer_to_call, torch.nn.Module):
        raise createPoptorchError("module is not an instance of torch.nn.Module or function.")
    if any(isinstance(h, _BlockHook) for h in layer_to_call._forward_pre_hooks.values()):
        raise createPoptorchError("module has already been assigned to a block.")
    layer_to_call.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer_to_call


def removeBlocks(module) -> None:
    assert isinstance(module, torch.nn.Module)
    for m in module.modules():
        m._forward_pre_hooks = OrderedDict(
            (k, h) for k, h in m._forward_pre_hooks.items() if not isinstance(h, _BlockHook)
        )


def recomputationCheckpoint(*tensors: list[torch.Tensor]):
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        return type(tensors[0])(recomputationCheckpoint(*tensors[0]))
    out = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise ValueError("All inputs must be tensors")
        out.append(t)  # an identity op on the IPU graph
    if _checkpoint_calls:
        _checkpoint_calls[-1] += len(out)
    return out[0] if len(out) == 1 else tuple(out)


def serializedMatMul(lhs, rhs, mode, factor=0, keep_precision=False):
    """python/ops.py: asserts its argument types, then an ordinary matmul annotated for PopART
    (which refuses a factor that does not divide the split dimension, willow MatMulOp::setup)."""
    from .enums import MatMulSerializationMode

    assert isinstance(keep_precision, bool)
    assert isinstance(factor, int)
    assert isinstance(mode, MatMulSerializationMode)
    if mode == MatMulSerializationMode.OutputChannels and factor and rhs.shape[-1] % factor:
        raise createPoptorchError(
            f"Invalid serialisation factor {factor} for output channels dim "
            f"{rhs.shape[-1]}. output_channels dim should be a multple of the "
            "serialisation factor"
        )
    serialized_matmuls.append((mode, factor))
    return torch.matmul(lhs, rhs)


def block_annotations(model: torch.nn.Module) -> list[tuple[str, _BlockHook]]:
    """(module path, hook) for every BeginBlock in the model: what the tracer would meet."""
    found = []
    for path, m in model.named_modules():
        for hook in m._forward_pre_hooks.values():
            if isinstance(hook, _BlockHook):
                found.append((path, hook))
    return found


def checkpointed_modules(model: torch.nn.Module) -> list[str]:
    """Module paths whose forward hooks call recomputationCheckpoint on the output.

    The real tracer sees checkpoint ops in the graph; the fake probes each forward hook
    with a dummy tensor and watches for the call.
    """
    found = []
    probe = torch.empty(1, device="meta")
    for path, m in model.named_modules():
        for hook in list(m._forward_hooks.values()):
            _checkpoint_calls.append(0)
            try:
                hook(m, (probe,), probe)
            except Exception:
                pass
            finally:
                calls = _checkpoint_calls.pop()
            if calls:
                found.append(path)
                break
    return found
