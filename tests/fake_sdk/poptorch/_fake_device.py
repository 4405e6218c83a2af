"""The fake IPU: what a compile decides, standing in for PopART + Poplar + the hardware.

It looks only at what PopTorch itself sees (the wrapped module, its parameter dtypes and
BeginBlock/checkpoint annotations, the frozen Options, the optimizer, the compile inputs),
rebuilds the Problem/Config those imply, traces the module on `meta` and asks the tuner's
estimator for memory with DELIBERATELY DIFFERENT constants: screening and compiles disagree
near the capacity line, as they will on hardware. It then writes a `profile.pop` (JSON,
read by the fake `pva`) and raises PopTorch's OOM error when a tile overflows.

Environment (documented in tests/fake_sdk/README.md):
  FAKE_POPTORCH_IPUS            IPUs attached to this "machine" (default 0: offline only)
  FAKE_POPTORCH_IPU_VERSION     their version (default 2)
  FAKE_POPTORCH_FAULT           crash | abort | exit | hang | compile_error | long_errors
  FAKE_POPTORCH_FAULT_MATCH     apply the fault only where the cwd or autoReport.directory
                                contains this substring (e.g. "trial-0003")
  FAKE_POPTORCH_CONSTANTS       JSON of estimator constant factors replacing the default skew
  FAKE_POPTORCH_TIME_SCALE      multiplies the modelled seconds per call (default 1)
  FAKE_POPTORCH_MAX_CALL_S      caps the sleep of one call (default 0.25 s)
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import signal
import sys
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.backends.estimate.constants import NOMINAL
from ipu_autotune.backends.targets import get_target
from ipu_autotune.models.hf import jit_like_tracing
from ipu_autotune.models.inputs import DTYPES
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import trace_module

from . import enums, optim
from .ops import block_annotations, checkpointed_modules, serialized_matmuls
from .options import ShardedExecution
from .poptorch_core import Error, attached_ipus, throw

#: the "hardware" differs from the estimator's nominal model: more code per op, a busier
#: busiest tile, bigger planner temporaries (factors on NOMINAL).
DEFAULT_SKEW = {"code_bytes_per_op": 1.2, "tile_imbalance": 1.05, "temporary_plan_factor": 1.1}
FAULTS = ("crash", "abort", "exit", "hang", "compile_error", "long_errors")
OOM_MESSAGE = "Out of memory: Cannot fit all variable data onto one or more tiles"
IO_TILE_BYTES = 64 * 1024  # stream buffers on each I/O tile
GAP_FRACTION = 0.02  # alignment gaps: includingGaps - excludingGaps
CODE_SPLIT = {
    "vertexCode": 0.45,
    "controlCode": 0.10,
    "internalExchangeCode": 0.30,
    "globalExchangeCode": 0.05,
    "hostExchangeCode": 0.10,
}
RECOMPUTE = {0: "none", 1: "standard", 2: "norm_only", 3: "pipeline", 4: "all"}
TARGET_OF_VERSION = {1: "mk1", 2: "mk2", 21: "mk2"}


def constants():
    factors = dict(DEFAULT_SKEW)
    raw = os.environ.get("FAKE_POPTORCH_CONSTANTS")
    if raw:
        factors = json.loads(raw)
    return NOMINAL.scaled(**factors)


# --- SessionOptions the C++ side accepts (popart_compiler/source/SessionOptions.cpp) ------

_BOOL = {
    "aliasZeroCopy",
    "automaticLossScalingSettings.enabled",
    "compileEngine",
    "constantWeights",
    "decomposeGradSum",
    "delayVarUpdates",
    "disableGradAccumulationTensorStreams",
    "disableOptimizerStateTensorStreams",
    "enableEngineCaching",
    "enableExplicitMainLoops",
    "enableFloatingPointChecks",
    "enableGradientAccumulation",
    "enableLoadAndOffloadRNGState",
    "enableOutlining",
    "enablePipelining",
    "enablePrefetchDatastreams",
    "enableReplicatedGraphs",
    "enableStableNorm",
    "enableStochasticRounding",
    "explicitRecomputation",
    "instrumentWithHardwareCycleCounter",
    "rearrangeAnchorsOnHost",
    "rearrangeStreamsOnHost",
    "scheduleNonWeightUpdateGradientConsumersEarly",
    "useHostCopyOps",
    "enableExplicitIR",
    "replicatedCollectivesSettings.mergeAllReduceCollectives",
    "replicatedCollectivesSettings.prepareScheduleForMergingCollectives",
}
_UINT = {
    "accumulationFactor",
    "automaticLossScalingSettings.updatePeriod",
    "defaultBufferingDepth",
    "defaultPrefetchBufferingDepth",
    "numIOTiles",
    "accumulateOuterFragmentSettings.schedule",
    "automaticLossScalingSettings.gradientTensorTrackingMethod",
    "patterns_level",
}
_ENUM = {
    "autoRecomputation": 5,
    "syntheticDataMode": 4,
    "subgraphCopyingStrategy": 2,
    "virtualGraphMode": 5,
    "mergeVarUpdate": 4,
    "accumulationAndReplicationReductionType": 3,
    "meanAccumulationAndReplicationReductionStrategy": 3,
}
_DOUBLE = {
    "outlineThreshold",
    "automaticLossScalingSettings.binEdgeLocation",
    "automaticLossScalingSettings.thresholdUpperCountProportion",
    "timeLimitScheduler",
}
_STRING = {"cachePath", "partialsTypeMatMuls", "logDir", "saveInitializersToFile"}
_CONTAINER = {
    "engineOptions",
    "convolutionOptions",
    "matmulOptions",
    "lstmOptions",
    "gclOptions",
    "reportOptions",
    "updatableNamedBuffers",
    "patterns",
    "customCodelets",
    "dotChecks",
    "hardwareInstrumentations",
    "accumulateOuterFragmentSettings.excludedVirtualGraphs",
}
#: Poplar engine options the fake knows; Poplar rejects unknown names.
_ENGINE = {
    "debug.allowOutOfMemory",
    "debug.instrument",
    "autoReport.all",
    "autoReport.directory",
    "autoReport.outputGraphProfile",
    "autoReport.outputExecutionProfile",
    "autoReport.outputDebugInfo",
    "autoReport.outputLoweredVars",
    "autoReport.outputArchive",
    "autoReport.outputSerializedGraph",
    "autoReport.executionProfileProgramRunCount",
    "autoReport.streamAtEachRun",
    "profiler.format",
    "profiler.includeCycleEstimates",
    "profiler.includeFlopEstimates",
    "target.syncReplicasIndependently",
    "target.hostSyncTimeout",
    "target.deterministicWorkers",
    "opt.useAutoloader",
}


def _cpp_error(message: str) -> Error:
    return throw(Error, "poptorch_cpp_error", message)


def check_popart_options(options: dict) -> None:
    for key, value in options.items():
        if isinstance(value, bool):
            ok, kind = key in _BOOL, "bool"
        elif isinstance(value, int):
            ok, kind = key in _UINT or key in _ENUM, "uint64"
            if key in _ENUM and not 0 <= value < _ENUM[key]:
                raise _cpp_error(f"Value for {key} out of range")
        elif isinstance(value, float):
            ok, kind = key in _DOUBLE, "double"
        elif isinstance(value, str):
            ok, kind = key in _STRING, "string"
        elif isinstance(value, (dict, list, set, tuple)):
            ok, kind = key in _CONTAINER, "container"
        else:
            raise _cpp_error(f"Unknown value type {type(value).__name__} for option {key}")
        if not ok:
            raise _cpp_error(f"Unknown {kind} option {key}")
    for name, value in options.get("engineOptions", {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise _cpp_error(f"engineOptions must map str to str, got {name!r}: {value!r}")
        if name not in _ENGINE:
            raise throw(Error, "poplar_invalid_option", f"Unrecognised option '{name}'")


# --- what the model computes in: PopTorch's type promotion ----------------------------------

_HEAVY = {
    "conv1d",
    "conv2d",
    "conv3d",
    "linear",
    "matmul",
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "__matmul__",
    "scaled_dot_product_attention",
}
_NO_PROMOTION = {"to", "type", "half", "float", "double", "__get__", "__set__", "copy_"}


class PopTorchTypes(TorchFunctionMode):
    """Mixed fp16/fp32 ops are upcast to fp32 (PopTorch 3.x dispatcher, supported_ops.rst),
    and every conv/matmul's compute dtype is counted (by output elements)."""

    def __init__(self):
        super().__init__()
        self.heavy = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in _NO_PROMOTION:
            floats = {
                a.dtype
                for a in tree_leaves((args, kwargs))
                if isinstance(a, torch.Tensor) and a.is_floating_point()
            }
            if len(floats) > 1:
                args, kwargs = tree_map(
                    lambda a: (
                        a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                    ),
                    (args, kwargs),
                )
        out = func(*args, **kwargs)
        if name in _HEAVY and isinstance(out, torch.Tensor):
            self.heavy[out.dtype] += out.numel()
        return out


# --- reconstruction -----------------------------------------------------------------------


def _outputs(out):
    tensors = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    loss = next((t for t in reversed(tensors) if t.dim() == 0), None)
    logits = next((t for t in tensors if t.dim() >= 2), None)
    return logits, loss


def _optimizer_name(optimizer) -> tuple[str, str]:
    state = "half" if getattr(optimizer, "accum_type", torch.float32) == torch.float16 else "float"
    if isinstance(optimizer, optim.SGD) or type(optimizer) is torch.optim.SGD:
        return (
            "sgd_combined" if getattr(optimizer, "use_combined_accum", False) else "sgd"
        ), state
    for cls, name in (
        (optim.AdamW, "adamw"),
        (optim.Adam, "adam"),
        (optim.LAMB, "lamb"),
        (optim.RMSprop, "rmsprop"),
        (torch.optim.AdamW, "adamw"),
        (torch.optim.Adam, "adam"),
        (torch.optim.RMSprop, "rmsprop"),
    ):
        if isinstance(optimizer, cls):
            return name, state
    raise throw(Error, "poptorch_py_error", f"Unsupported optimizer {type(optimizer).__name__}")


def _blocks(model, options) -> list[tuple[int, str]]:
    """(IPU, module path) per BeginBlock, as the default stage manager resolves them."""
    strategy = options._execution_strategy
    out = []
    for n, (path, hook) in enumerate(block_annotations(model)):
        block_id = hook._user_id if hook._user_id is not None else str(n)
        if strategy._block_map:
            assert block_id in strategy._block_map, (
                f"Unknown Block '{block_id}' list of expected Blocks: {list(strategy._block_map)}"
            )
            stage = strategy._block_map[block_id]
            ipu = stage._ipu if stage._ipu is not None else stage._stage_id
        elif strategy._auto_stage == enums.AutoStage.SameAsIpu:
            assert hook._ipu_id is not None, (
                "poptorch.AutoStage.SameAsIpu was selected but no IPU was specified for block "
                f"{block_id}"
            )
            ipu = hook._ipu_id
        else:
            ipu = hook._ipu_id if hook._ipu_id is not None else n
        out.append((ipu, path))
    return out


class Verdict:
    """Everything the fake compile decided, kept on the executor for tests to inspect."""

    def __init__(
        self, problem, config, measurement, profile_path, seconds_per_call, compute_dtype
    ):
        self.problem = problem
        self.config = config
        self.measurement = measurement
        self.profile_path = profile_path
        self.seconds_per_call = seconds_per_call
        self.compute_dtype = compute_dtype


#: forward arguments a training model takes as targets (transformers' names), not as inputs
LABEL_NAMES = ("labels", "start_positions", "end_positions")
#: torch dtype -> ipu_autotune's input dtype names
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def _bind_inputs(model, args) -> tuple[dict, dict]:
    """(inputs, labels) by the names of model.forward, as PopTorch's args parser binds them."""
    bound = inspect.signature(model.forward).bind_partial(*args).arguments
    inputs = {
        k: v for k, v in bound.items() if k not in LABEL_NAMES and isinstance(v, torch.Tensor)
    }
    labels = {k: v for k, v in bound.items() if k in LABEL_NAMES and isinstance(v, torch.Tensor)}
    return inputs, labels


def reconstruct(
    model, options, optimizer, args
) -> tuple[Problem, Config, object, torch.dtype, int]:
    """The Problem/Config implied by what PopTorch sees, the module's FP32 meta trace, its
    compute dtype and its forward pipeline stages."""
    if len(args) < 2:
        raise throw(Error, "poptorch_py_error", "training models take the inputs and the labels")
    inputs, labels = _bind_inputs(model, args)
    if not labels:  # one image batch and its labels, positionally
        inputs, labels = {"x": args[0]}, {"labels": args[1]}
    named = len(inputs) > 1 or any(
        not t.is_floating_point() and t.dtype != torch.uint8 for t in inputs.values()
    )
    x = next(iter(inputs.values()))
    opts = options
    ga = opts.Training.gradient_accumulation
    di, rf, group = opts.device_iterations, opts.replication_factor, opts.input_group_size
    per_call = di * (rf // group) * ga
    for t in args:
        n = t.shape[0] if t.dim() else 1
        assert n % per_call == 0, (
            f"Invalid batch dimension: In the input {tuple(t.shape)}, the batch dimension ({n}) "
            f"must be a multiple of Options.deviceIterations({di}) * "
            f"(Options.replicationFactor({rf}) / "
            f"Options.inputReplicaGrouping.input_group_size({group})) * "
            f"Options.Training.gradientAccumulation({ga}) = {per_call}"
        )
    micro = x.shape[0] // per_call
    input_shape = tuple(x.shape[1:])

    # What the graph computes in: run on meta with the real dtypes and PopTorch's promotion.
    meta = copy.deepcopy(model).to("meta")

    def on_meta(t):
        return torch.zeros((micro, *t.shape[1:]), dtype=t.dtype, device="meta")

    meta_args = [on_meta(t) for t in args]
    types = PopTorchTypes()
    serialized_matmuls.clear()
    with types, jit_like_tracing():  # PopTorch traces with torch.jit, as transformers can tell
        logits, loss = _outputs(meta(*meta_args))
    factors = {
        f for mode, f in serialized_matmuls if mode == enums.MatMulSerializationMode.OutputChannels
    }
    if loss is None:
        raise throw(
            Error, "poptorch_py_error", "The model must return a loss (a scalar) in training"
        )
    compute = types.heavy.most_common(1)[0][0] if types.heavy else torch.float32
    params = Counter()
    for p in model.parameters():
        if p.is_floating_point():
            params[p.dtype] += p.numel()
    half_weights = bool(params) and params.most_common(1)[0][0] == torch.float16
    half_compute = compute == torch.float16
    precision = "16.16" if half_weights else ("16.32" if half_compute else "32.32")

    root, prefix = _traced_root(meta)
    blocks = [(ipu, _strip(path, prefix)) for ipu, path in _blocks(model, opts)]
    ipus_per_replica = max((ipu for ipu, _ in blocks), default=0) + 1
    splits = tuple(path for ipu, path in sorted(blocks) if ipu > 0)
    popart = opts._Popart.options
    locations = opts.TensorLocations._values.get("location_optimizer", {})
    name, state = _optimizer_name(optimizer)
    als = bool(popart.get("automaticLossScalingSettings.enabled", False))
    if als and torch.float16 not in params and not half_compute:
        raise throw(
            Error, "popart_exception", "No tracked gradient tensors of type fp16 were found."
        )
    amp = opts.available_memory_proportion
    if "ipu_version" in opts._values and opts.connection_type == enums.ConnectionType.Never:
        version = opts.ipu_version
    else:
        version = int(os.environ.get("FAKE_POPTORCH_IPU_VERSION", "2"))
    specs = (
        tuple(
            f"{k}:{'x'.join(map(str, t.shape[1:]))}:{DTYPE_NAMES[t.dtype]}"
            for k, t in inputs.items()
        )
        if named
        else ()
    )
    problem = Problem(
        model="traced-by-fake-poptorch",
        batch_size=micro,
        input_shape=input_shape,
        inputs=specs,
        num_classes=int(logits.shape[-1]) if logits is not None else 1,
        optimizer=name,
        ipus=ipus_per_replica * rf,
        target=TARGET_OF_VERSION.get(version, "mk2"),
    )
    config = Config(
        precision=precision,
        partials="half" if popart.get("partialsTypeMatMuls") == "half" else "float",
        stochastic_rounding=bool(popart.get("enableStochasticRounding", False)),
        loss_scaling="auto" if als else float(getattr(optimizer, "loss_scaling", 1.0)),
        optimizer_state=state,
        ipus_per_replica=ipus_per_replica,
        replicas=rf,
        splits=splits,
        execution="sharded"
        if isinstance(opts._execution_strategy, ShardedExecution)
        else "pipelined",
        recompute=RECOMPUTE[popart["autoRecomputation"]]
        if "autoRecomputation" in popart
        else "default",
        checkpoints=tuple(_strip(p, prefix) for p in checkpointed_modules(model)),
        available_memory_proportion=tuple(float(amp.get(i, 0.6)) for i in range(ipus_per_replica)),
        optimizer_offload=locations.get("onChip", 1) == 0,
        replicated_tensor_sharding=locations.get("useReplicatedTensorSharding", 0) == 1,
        gradient_accumulation=ga,
        device_iterations=di,
        eight_bit_io=not named and x.dtype == torch.uint8,
        io_tiles=opts.TensorLocations._values.get("numIOTiles", 0),
        embedding_serialization=max(factors, default=1),
        # a token embedding in look-ups: the model holds its pieces (optimum's SerializedEmbedding)
        input_embedding_serialization=max(
            (
                len(m.split_embeddings)
                for m in model.modules()
                if isinstance(getattr(m, "split_embeddings", None), torch.nn.ModuleList)
            ),
            default=1,
        ),
    )

    # The FP32 trace the estimator expects; promotion keeps casts from breaking float weights.
    # The net inside the wrappers takes the inputs by name (and the labels, when its forward
    # names them: transformers models compute their own loss).
    kwargs = None
    traced = root
    if named:
        takes = inspect.signature(root.forward).parameters
        if all(k in takes for k in inputs):
            kwargs = {
                k: on_meta(t) for k, t in {**inputs, **labels}.items() if k in inputs or k in takes
            }
        else:  # the wrapper computes what the net cannot (masked-token gather): trace it all,
            traced = meta  # as PopTorch does, and name units from the net
            kwargs = {k: on_meta(t) for k, t in {**inputs, **labels}.items()}
    with PopTorchTypes():
        profile = trace_module(
            traced.float(), micro, input_shape, problem.num_classes, "fake", kwargs
        )
    if traced is not root:
        _strip_profile(profile, prefix)
    _check_stage_order(profile, blocks, opts)
    return problem, config, profile, compute, _forward_stages(profile, blocks)


def _forward_stages(profile, blocks) -> int:
    """IPU switches + 1 along the execution order, as PopTorch counts pipeline stages: code
    before the first block runs on IPU0, and a block that returns to an IPU starts a new stage."""
    position = {p: i for i, p in enumerate(profile.module_order)}
    ipus = [0] + [ipu for _, ipu in sorted((position[p], ipu) for ipu, p in blocks)]
    return 1 + sum(a != b for a, b in pairwise(ipus))


def _traced_root(model):
    """Look inside wrappers (loss, input normalisation: one child with parameters) to the net.

    Stages begin at the net's blocks; tracing the wrapper would see the whole net as one
    unit. Returns the net and the path prefix to strip from annotations.
    """
    prefix = ""
    while True:
        with_params = [
            (n, c) for n, c in model.named_children() if any(True for _ in c.parameters())
        ]
        if len(with_params) != 1:
            return model, prefix
        name, model = with_params[0]
        prefix += name + "."


def _strip(path: str, prefix: str) -> str:
    return path[len(prefix) :] if prefix and path.startswith(prefix) else path


def _strip_profile(profile, prefix: str) -> None:
    """Unit and module paths of a wrapper's trace, as the net inside names them."""
    for unit in profile.units:
        unit.path = _strip(unit.path, prefix)
        unit.members = [_strip(m, prefix) for m in unit.members]
    profile.module_order = [_strip(m, prefix) for m in profile.module_order]


def _check_stage_order(profile, blocks, opts) -> None:
    position = {p: i for i, p in enumerate(profile.module_order)}
    for _, path in blocks:
        if path not in position:
            raise throw(
                Error,
                "popart_exception",
                f"BeginBlock on module '{path}', which the model never calls",
            )
    if opts._execution_strategy._auto_stage == enums.AutoStage.SameAsIpu:
        ordered = [ipu for _, ipu in sorted((position[p], ipu) for ipu, p in blocks)]
        if ordered != sorted(ordered):
            raise throw(
                Error,
                "popart_exception",
                "Pipeline stages are not in ascending order: with AutoStage.SameAsIpu the "
                "model must not return to an IPU it has left",
            )


def check_pipeline(config: Config, options, forward_stages: int) -> None:
    """Compiler.cpp: in training, gradientAccumulation >= the number of pipeline stages."""
    if isinstance(options._execution_strategy, ShardedExecution) or forward_stages < 2:
        return
    stages = 2 * forward_stages - 1
    if config.gradient_accumulation < stages:
        raise _cpp_error(
            "poptorch.Options().Training.gradientAccumulation must be greater than or equal to "
            f"the number of pipeline stages ({stages}) when using poptorch.PipelinedExecution. "
            f"Please note that a model with {forward_stages} pipeline stages in PopTorch will "
            f"have an additional {forward_stages - 1} stages when training."
        )


def check_device(total_ipus: int, options) -> None:
    """createDevice: the IPU count rules, and attaching when not offline (reference §2.6)."""
    if total_ipus > 64:
        raise _cpp_error(f"Too many IPUs requested ({total_ipus}): require distributed execution")
    if options.connection_type == enums.ConnectionType.Never:
        return
    if total_ipus & (total_ipus - 1) and not options.auto_round_num_ipus:
        raise _cpp_error(
            f"The model uses {total_ipus} IPUs but PopTorch must reserve a power of two"
        )
    if attached_ipus() < total_ipus:
        why = (
            "No IPU detected in the system"
            if attached_ipus() == 0
            else f"No device found on the system with {total_ipus} IPUs: the configuration needs "
            "changing"
        )
        raise _cpp_error(f"Failed to acquire {total_ipus} IPU(s): {why}")


# --- faults -------------------------------------------------------------------------------


def active_fault(report_dir: str | None) -> str | None:
    kind = os.environ.get("FAKE_POPTORCH_FAULT", "").strip()
    if not kind:
        return None
    assert kind in FAULTS, f"FAKE_POPTORCH_FAULT={kind!r}: use one of {FAULTS}"
    match = os.environ.get("FAKE_POPTORCH_FAULT_MATCH", "")
    if match and match not in os.getcwd() and match not in str(report_dir or ""):
        return None
    return kind


def inject(kind: str | None) -> None:
    """Faults that happen regardless of the configuration (long_errors acts at the OOM raise)."""
    if kind is None or kind == "long_errors":
        return
    print(f"fake poptorch: injecting fault '{kind}'", file=sys.stderr, flush=True)
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)  # what a native crash in Poplar looks like
    elif kind == "abort":
        os.abort()
    elif kind == "exit":
        os._exit(1)
    elif kind == "hang":
        while True:
            time.sleep(60)
    elif kind == "compile_error":
        raise throw(
            Error,
            "popart_exception",
            "fake injected failure: unsupported operation 'aten::fake_op'",
        )


# --- the profile --------------------------------------------------------------------------


def _tile_bytes(required: int, busiest: int, compute_tiles: int, tiles: int) -> list[int]:
    """Spread an IPU's bytes over its tiles: mean required/compute_tiles, max `busiest`.

    Weights w_j = (2-k) + 2(k-1) f_j over a deterministic permutation f_j of [0, 1]: mean 1,
    max k = busiest/mean. I/O tiles (the last ones) hold stream buffers only.
    """
    mean = required / compute_tiles
    k = min(max(busiest / mean if mean else 1.0, 1.0), 1.99)
    out = []
    for j in range(compute_tiles):
        f = ((j * 7919) % compute_tiles) / max(1, compute_tiles - 1)
        out.append(int(round(mean * ((2 - k) + 2 * (k - 1) * f))))
    out += [IO_TILE_BYTES] * (tiles - compute_tiles)
    return out


def write_profile(path: Path, problem: Problem, config: Config, m, compute) -> None:
    target = get_target(problem.target)
    tiles = target.tiles
    compute_tiles = tiles - config.io_tiles
    ipus = []
    nal_peak = 0  # per replica: the sum of every tile's not-always-live bytes
    for i, required in enumerate(m.required_bytes):
        bd = m.breakdown[i]
        total = _tile_bytes(required, m.max_tile_bytes[i], compute_tiles, tiles)
        always_live = (
            bd["weights"] + bd["optimizer"] + bd["gradients"] + bd["stash"] + bd["code/exchange"]
        )
        excluding = [int(t * (1 - GAP_FRACTION)) for t in total]
        always = [int(e * always_live / required) for e in excluding]
        nal_peak += sum(excluding) - sum(always)
        ipus.append(
            {
                "total": total,
                "excluding": excluding,
                "alwaysLive": always,
                "categories": {
                    c: bd["code/exchange"] / required * share for c, share in CODE_SPLIT.items()
                },
            }
        )
    data = {
        "format": "fake-pva/1",
        "poplarVersion": "3.4.0 (fake poptorch)",
        "target": {
            "type": "Ipu",
            "bytesPerTile": target.bytes_per_tile,
            "tilesPerIpu": tiles,
            "numIPUs": config.ipus_per_replica * config.replicas,
            "numReplicas": config.replicas,
            "ipusPerReplica": config.ipus_per_replica,
            "clockFrequency": target.clock_hz,
        },
        "ipus": ipus,
        "liveness": [int(nal_peak * s) for s in (0.1, 0.4, 0.8, 1.0, 0.7, 0.3)],
        "fake": {
            "problem": problem.to_dict(),
            "config": config.to_dict(),
            "estimate": m.to_dict(),
            "compute_dtype": str(compute),
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _profile_path(options) -> Path | None:
    engine = options._Popart.options.get("engineOptions", {})
    wanted = (
        engine.get("autoReport.all") == "true"
        or engine.get("autoReport.outputGraphProfile") == "true"
    )
    if not wanted:
        return None
    name = options._values.get("model_name", "training")
    return Path(engine.get("autoReport.directory", ".")) / name / "profile.pop"


def _raise_oom(path: Path | None, allow_oom: bool, fault: str | None) -> None:
    if path is not None and allow_oom:
        print(
            f"[ERROR] Out of memory, the graph profile is available here: {path}",
            file=sys.stderr,
            flush=True,
        )
    if fault == "long_errors":
        # Over 80 lines: PopTorch writes the message to ./poptorch_error.log (reference §3.4).
        lines = [OOM_MESSAGE] + [f"  tile {j}: over by {1000 + j} bytes" for j in range(100)]
        Path("poptorch_error.log").write_text("\n".join(lines) + "\n")
        raise throw(Error, "popart_exception", "See poptorch_error.log for details")
    raise throw(Error, "popart_exception", OOM_MESSAGE)


def compile_model(model, options, optimizer, args, record: dict | None = None) -> Verdict:
    """The whole fake compile. Raises like PopTorch; returns the verdict when it fits.

    `record` receives what the fake understood (problem, config, estimate) before anything
    is raised, so tests can compare it with the configuration the tuner meant.
    """
    record = {} if record is None else record
    check_popart_options(options._Popart.options)
    problem, config, profile, compute, stages = reconstruct(model, options, optimizer, args)
    record.update(problem=problem, config=config, compute_dtype=compute, forward_stages=stages)
    check_pipeline(config, options, stages)
    check_device(config.ipus_per_replica * config.replicas, options)
    engine = options._Popart.options.get("engineOptions", {})
    fault = active_fault(engine.get("autoReport.directory"))
    inject(fault)
    m = estimate(problem, config, profile, constants())
    record["measurement"] = m
    path = _profile_path(options)
    allow_oom = engine.get("debug.allowOutOfMemory") == "true"
    # Without allowOutOfMemory, Poplar stops at the first overflow: no profile (reference §3.6).
    if path is not None and (m.feasible or allow_oom):
        write_profile(path, problem, config, m, compute)
    if not m.feasible:
        _raise_oom(path, allow_oom, fault)
    scale = float(os.environ.get("FAKE_POPTORCH_TIME_SCALE", "1"))
    per_call = (m.step_time_s or 0.0) * config.device_iterations * scale
    return Verdict(problem, config, m, path, per_call, compute)
