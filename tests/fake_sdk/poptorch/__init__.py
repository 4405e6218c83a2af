"""A test double of PopTorch 3.4 (graphcore/poptorch `python/`), for machines without the SDK.

Same public names and signatures as the reference (docs: tests/fake_sdk/README.md), strict
where PopTorch is strict, and a fake IPU that decides memory with a skewed copy of the
tuner's estimator. Put `tests/fake_sdk` on sys.path / PYTHONPATH to use it; never installed.
"""

from . import enums, optim, poptorch_core
from ._data_loader import DataLoader
from ._impl import createPoptorchError, isWrapped
from ._poplar_executor import PoplarExecutor, trainingModel
from .enums import (
    AutoStage,
    CommGroupType,
    ConnectionType,
    DataLoaderMode,
    HalfFloatCastingBehavior,
    Liveness,
    MatMulSerializationMode,
    MeanReductionStrategy,
    OutputMode,
    ReductionType,
    SyncPattern,
)
from .ops import BeginBlock, recomputationCheckpoint, removeBlocks, serializedMatMul
from .options import (
    Options,
    PipelinedExecution,
    ShardedExecution,
    Stage,
    TensorLocationSettings,
)
from .poptorch_core import Error, RecoverableError, UnrecoverableError

__version__ = "3.4.0+fake"
__fake__ = True  # so a test can tell the double from a real SDK


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    return poptorch_core.ipuHardwareVersion(num_ipus) != 0


def ipuHardwareVersion() -> int:
    version = poptorch_core.ipuHardwareVersion()
    assert version != 0, "No IPU hardware available on this system"
    return version


def setLogLevel(level) -> None:
    pass


__all__ = [
    "AutoStage",
    "BeginBlock",
    "CommGroupType",
    "ConnectionType",
    "DataLoader",
    "DataLoaderMode",
    "Error",
    "HalfFloatCastingBehavior",
    "Liveness",
    "MatMulSerializationMode",
    "MeanReductionStrategy",
    "Options",
    "OutputMode",
    "PipelinedExecution",
    "PoplarExecutor",
    "RecoverableError",
    "ReductionType",
    "ShardedExecution",
    "Stage",
    "SyncPattern",
    "TensorLocationSettings",
    "UnrecoverableError",
    "createPoptorchError",
    "enums",
    "ipuHardwareIsAvailable",
    "ipuHardwareVersion",
    "isWrapped",
    "optim",
    "recomputationCheckpoint",
    "removeBlocks",
    "serializedMatMul",
    "setLogLevel",
    "trainingModel",
]
