"""poptorch.Options and its namespaces, with the signatures and checks of `python/options.py`.

Only what the reference documents is here; anything else is an AttributeError, so a typo
in the tuner's snippet or backend fails the tests as it would fail on a real SDK.
Not modelled: phased execution, Block/BlockFunction context managers, DataLoader.
"""

from __future__ import annotations

import builtins
import copy
import json
import os

import torch

from . import enums
from ._options_impl import OptionsDict


class _JitOptions(OptionsDict):
    def traceModel(self, trace_model: bool) -> _JitOptions:
        if trace_model:
            raise ValueError("options.Jit.traceModel(True) is no longer supported")
        return self


class _PopartOptions:
    """Raw PopART SessionOptions: no Python-side checks; the compile checks keys and types."""

    def __init__(self) -> None:
        self._is_frozen = False
        self.options = {}
        self.set("instrumentWithHardwareCycleCounter", False)
        self.set("rearrangeAnchorsOnHost", False)

    def __deepcopy__(self, memo):
        clone = _PopartOptions()
        memo[id(self)] = clone
        clone.options = copy.deepcopy(self.options, memo)
        return clone

    def checkIsFrozen(self, option=None):
        if getattr(self, "_is_frozen", False) and option != "_is_frozen":
            raise AttributeError("Can't modify frozen Options")

    def set(
        self, key: str, value: int | float | str | list[str] | builtins.set[str]
    ) -> _PopartOptions:
        self.checkIsFrozen()
        self.options[key] = value
        return self

    def setEngineOptions(self, engine_options: dict[str, str]) -> _PopartOptions:
        self.set("engineOptions", engine_options)  # replaces the whole dict, as the real one
        return self

    def setPatterns(self, patterns: dict[str, bool], level: int = 2) -> _PopartOptions:
        assert isinstance(level, int)
        assert isinstance(patterns, dict)
        self.set("patterns_level", level)
        self.set("patterns", patterns)
        return self

    def __repr__(self):
        return (
            f"{type(self).__name__}("
            + ", ".join(f"{k}={v!r}" for k, v in self.options.items())
            + ")"
        )


class _PrecisionOptions(OptionsDict):
    def __init__(self, popart_options: _PopartOptions) -> None:
        self._popart_options = popart_options
        super().__init__()

    def halfFloatCasting(self, half_float_casting) -> _PrecisionOptions:
        return self  # deprecated no-op (warns in the real one)

    def runningStatisticsAlwaysFloat(self, value: bool) -> _PrecisionOptions:
        if not isinstance(value, bool):
            raise ValueError("runningStatisticsAlwaysFloat needs to be set to a bool")
        return self

    def enableFloatingPointExceptions(self, enabled: bool) -> _PrecisionOptions:
        assert isinstance(enabled, bool), "enableFloatingPointExceptions needs to be set to a bool"
        self._popart_options.set("enableFloatingPointChecks", enabled)
        return self

    def enableStochasticRounding(self, enabled: bool) -> _PrecisionOptions:
        self._popart_options.set("enableStochasticRounding", enabled)
        return self

    def setPartialsType(self, dtype: torch.dtype) -> _PrecisionOptions:
        if dtype in (torch.float, torch.float32):
            kind = "float"
        elif dtype in (torch.half, torch.float16):
            kind = "half"
        else:
            raise ValueError(
                "parameter to setPartialsType should be either torch.float or torch.half"
            )
        self._popart_options.set("partialsTypeMatMuls", kind)
        self._popart_options.set("convolutionOptions", {"partialsType": kind})  # replaces
        return self


class _TrainingOptions(OptionsDict):
    def __init__(self, popart_options: _PopartOptions) -> None:
        self._popart_options = popart_options
        super().__init__(
            gradient_accumulation=1,
            accumulation_and_replication_reduction_type=enums.ReductionType.Mean,
            meanAccumulationAndReplicationReductionStrategy=enums.MeanReductionStrategy.Post,
        )

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:
        self.set(gradient_accumulation=gradient_accumulation)
        return self

    def accumulationAndReplicationReductionType(self, reduction_type) -> _TrainingOptions:
        if (
            not isinstance(reduction_type, enums.ReductionType)
            or reduction_type == enums.ReductionType.NoReduction
        ):
            raise ValueError(
                "accumulationAndReplicationReductionType must be set to "
                "poptorch.ReductionType.Mean or poptorch.ReductionType.Sum"
            )
        self.set(accumulation_and_replication_reduction_type=reduction_type)
        return self

    def setMeanAccumulationAndReplicationReductionStrategy(
        self, mean_reduction_strategy
    ) -> _TrainingOptions:
        self.set(meanAccumulationAndReplicationReductionStrategy=mean_reduction_strategy)
        return self

    def setAutomaticLossScaling(self, enabled: bool) -> _TrainingOptions:
        self._popart_options.set("automaticLossScalingSettings.enabled", enabled)
        return self

    def setConvolutionDithering(self, enabled: bool) -> _TrainingOptions:
        self._popart_options.set(
            "convolutionOptions", {"enableConvDithering": enabled}
        )  # replaces
        return self


class _DistributedOptions(OptionsDict):
    def __init__(self) -> None:
        self._gcd_mappings = {}
        super().__init__(num_distributed_processes=1, distributed_process_id=0, ipuof_configs={})
        self.setEnvVarNames("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")

    def disable(self) -> _DistributedOptions:
        self.set(num_distributed_processes=1, distributed_process_id=0)
        return self

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str) -> _DistributedOptions:
        return self.configureProcessId(
            int(os.environ.get(var_process_id, "0")), int(os.environ.get(var_num_processes, "1"))
        )

    def configureProcessId(self, process_id: int, num_processes: int) -> _DistributedOptions:
        self.set(distributed_process_id=process_id)
        self.set(num_distributed_processes=num_processes)
        return self

    @property
    def processId(self) -> int:
        return self.distributed_process_id

    @property
    def numProcesses(self) -> int:
        return self.num_distributed_processes


class TensorLocationSettings(OptionsDict):
    def minElementsForOffChip(self, min_elements: int) -> TensorLocationSettings:
        assert isinstance(min_elements, int)
        self.createOrSet(minElementsForOffChip=min_elements)
        return self

    def minElementsForReplicatedTensorSharding(self, min_elements: int) -> TensorLocationSettings:
        assert isinstance(min_elements, int)
        self.createOrSet(minElementsForReplicatedTensorSharding=min_elements)
        return self

    def useOnChipStorage(self, use: bool = True) -> TensorLocationSettings:
        if use is None:
            self.deleteIfExists("onChip")
        else:
            assert isinstance(use, bool)
            self.createOrSet(onChip=int(use))
        return self

    def useReplicatedTensorSharding(self, use: bool = True) -> TensorLocationSettings:
        assert isinstance(use, bool)
        self.createOrSet(useReplicatedTensorSharding=int(use))
        return self

    def useIOTilesToLoad(self, use: bool = True) -> TensorLocationSettings:
        assert isinstance(use, bool)
        self.createOrSet(useIOTilesToLoad=int(use))
        return self

    def useIOTilesToStore(self, use: bool = True) -> TensorLocationSettings:
        assert isinstance(use, bool)
        self.createOrSet(useIOTilesToStore=int(use))
        return self


class _TensorLocationOptions(OptionsDict):
    def numIOTiles(self, num_tiles: int) -> _TensorLocationOptions:
        assert isinstance(num_tiles, int)
        err = "numIOTiles must be an even number between 32 and 192."
        assert num_tiles >= 32, err
        assert num_tiles <= 192, err
        assert num_tiles % 2 == 0, err
        self.createOrSet(numIOTiles=num_tiles)
        return self

    def _location(self, name, location):
        assert isinstance(location, TensorLocationSettings)
        self.createOrSet(**{name: location.toDict()})
        return self

    def setActivationLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        return self._location("location_activation", location)

    def setWeightLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        return self._location("location_weight", location)

    def setOptimizerLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        return self._location("location_optimizer", location)

    def setAccumulatorLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        return self._location("location_accumulator", location)


# --- execution strategies -----------------------------------------------------------------


class Stage:
    def __init__(self, *block_ids: str) -> None:
        assert all(isinstance(b, str) for b in block_ids), (
            f"Block IDs are supposed to be strings but got {block_ids}"
        )
        self._blocks = block_ids
        self._stage_id = -1
        self._phase_id = -1
        self._ipu = None

    @property
    def blocks(self) -> list[str]:
        return self._blocks

    def ipu(self, ipu: int) -> Stage:
        assert isinstance(ipu, int)
        self._ipu = ipu
        return self


class _IExecutionStrategy:
    def __init__(self, auto_stage, block_map):
        self._auto_stage = auto_stage
        self._block_map = block_map

    def stage(self, block_id):
        assert block_id in self._block_map, f"Unknown block {block_id}"
        return self._block_map[block_id]

    def backendOptions(self):
        return {}


class PipelinedExecution(_IExecutionStrategy):
    def __init__(self, *args):
        block_map = {}
        auto_stage = enums.AutoStage.SameAsIpu
        if len(args) == 1 and isinstance(args[0], enums.AutoStage):
            auto_stage = args[0]
        else:
            for stage_id, arg in enumerate(args):
                if isinstance(arg, Stage):
                    stage = arg
                elif isinstance(arg, str):
                    stage = Stage(arg)
                else:
                    assert all(isinstance(e, str) for e in arg)
                    stage = Stage(*arg)
                stage._stage_id = stage_id
                for block in stage.blocks:
                    assert block not in block_map, f"{block} associated with more than one stage"
                    block_map[block] = stage
        super().__init__(auto_stage, block_map)

    def backendOptions(self):
        return {"execution_mode": 0}


class ShardedExecution(PipelinedExecution):
    def backendOptions(self):
        return {"execution_mode": 1}


# --- Options ------------------------------------------------------------------------------


class Options(OptionsDict):
    def __init__(self) -> None:
        self._jit = _JitOptions()
        self._popart = _PopartOptions()
        self._graphProcessing = _PrecisionOptions(self._popart)
        self._training = _TrainingOptions(self._popart)
        self._distributed = _DistributedOptions()
        self._tensor_locations = _TensorLocationOptions()
        self._execution_strategy = PipelinedExecution()
        self._source_location_excludes = [
            "install/poptorch",
            "site-packages/torch",
            "site-packages/poptorch",
        ]
        self._relax_optimizer_checks = False
        self._show_compilation_progress_bar = True
        self._module_namescope_enabled = True
        super().__init__(
            replication_factor=1,
            input_group_size=1,
            input_cgt=enums.CommGroupType.Consecutive,
            broadcast_buffers=True,
            device_iterations=1,
            log_dir=".",
            max_repeat_logs=4,
            auto_round_num_ipus=False,
            anchored_tensors={},
            output_mode=enums.OutputMode.Default.value,
            output_return_period=1,
            connection_type=enums.ConnectionType.Always.value,
            sync_pattern=enums.SyncPattern.Full.value,
            available_memory_proportion={},
        )
        path = os.environ.get("POPTORCH_CACHE_DIR", "")
        if path:
            self.enableExecutableCaching(path)
        self.from_json(os.environ.get("POPTORCH_DEFAULT_OPTIONS", "{}"))

    # namespaces
    @property
    def TensorLocations(self) -> _TensorLocationOptions:
        return self._tensor_locations

    @property
    def Distributed(self) -> _DistributedOptions:
        return self._distributed

    @property
    def Jit(self) -> _JitOptions:
        return self._jit

    @property
    def Precision(self) -> _PrecisionOptions:
        return self._graphProcessing

    @property
    def Training(self) -> _TrainingOptions:
        return self._training

    @property
    def _Popart(self) -> _PopartOptions:
        return self._popart

    # configuration files
    def from_json(self, string: str) -> Options:
        for option, value in json.loads(string).items():
            target = self
            for attribute in option.split("."):
                target = getattr(target, attribute)
            if isinstance(value, str) and "." in value:
                enum_name, _, member = value.partition(".")
                enum_type = getattr(enums, enum_name, None)
                value = getattr(enum_type, member, value) if enum_type else value
            target(*value) if isinstance(value, list) else target(value)
        return self

    def loadFromFile(self, filepath: str) -> Options:
        with open(filepath) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    exec(
                        f"options.{line}",
                        {"options": self, "poptorch": __import__("poptorch"), "torch": torch},
                    )
        return self

    # top-level options (reference §1.2)
    def sourceLocationExcludes(self, excludes: list[str]) -> Options:
        self._source_location_excludes = excludes
        return self

    def appendToLocationExcludes(self, *excludes: str) -> Options:
        self._source_location_excludes += excludes
        return self

    def showCompilationProgressBar(self, show: bool = True) -> Options:
        self._show_compilation_progress_bar = show
        return self

    def relaxOptimizerAttributesChecks(self, relax: bool = True) -> Options:
        self._relax_optimizer_checks = relax
        return self

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> Options:
        self.set(auto_round_num_ipus=auto_round_num_ipus)
        return self

    def deviceIterations(self, device_iterations: int) -> Options:
        self.set(device_iterations=device_iterations)
        return self

    def setExecutionStrategy(self, strategy) -> Options:
        assert isinstance(strategy, _IExecutionStrategy)
        self._execution_strategy = strategy
        return self

    def setAvailableMemoryProportion(
        self, available_memory_proportion: dict[str, float]
    ) -> Options:
        actual = {}
        for key, mem in available_memory_proportion.items():
            assert key.startswith("IPU"), (
                'Available memory proportions are expected to be in a dictionary of {"IPU0": 0.5} '
                f"where the 0 in IPU is the index of the IPU. Invalid key: {key}"
            )
            actual[int(key[3:])] = mem
        self.createOrSet(available_memory_proportion=actual)
        return self

    def replicationFactor(self, replication_factor: int) -> Options:
        self.set(replication_factor=replication_factor)
        return self

    def inputReplicaGrouping(self, input_group_size: int, input_group_type) -> Options:
        if input_group_type == enums.CommGroupType.NoGrouping:
            input_group_size, input_group_type = 1, enums.CommGroupType.Consecutive
        if input_group_type == enums.CommGroupType.All:
            raise ValueError("input_group_type cannot be All")
        if self.replication_factor < input_group_size:
            raise ValueError("input_group_size cannot be larger than replication_factor")
        if self.replication_factor % input_group_size:
            raise ValueError("input_group_size must be a factor of replication_factor")
        self.set(input_group_size=input_group_size)
        self.set(input_cgt=input_group_type)
        return self

    def broadcastBuffers(self, broadcast_buffers: bool = True) -> Options:
        self.set(broadcast_buffers=broadcast_buffers)
        return self

    def logDir(self, log_dir: str) -> Options:
        self.set(log_dir=log_dir)
        return self

    def maxRepeatLogs(self, max_lines: int | None) -> Options:
        self.set(max_repeat_logs=max_lines if max_lines is not None else 0)
        return self

    def modelName(self, name: str) -> Options:
        self.createOrSet(model_name=name)
        return self

    def enableExecutableCaching(self, path: str) -> Options:
        if path is None:
            self._Popart.set("enableEngineCaching", False)
        else:
            self._Popart.set("cachePath", path)
            self._Popart.set("enableEngineCaching", True)
        return self

    def useIpuModel(self, use_model: bool) -> Options:
        self.createOrSet(use_model=use_model)
        return self

    def connectionType(self, connection_type) -> Options:
        assert isinstance(connection_type, enums.ConnectionType)
        self.set(connection_type=connection_type.value)
        return self

    def syncPattern(self, sync_pattern) -> Options:
        assert isinstance(sync_pattern, enums.SyncPattern)
        self.set(sync_pattern=sync_pattern.value)
        return self

    def useIpuId(self, ipu_id: int) -> Options:
        assert isinstance(ipu_id, int)
        self.createOrSet(ipu_id=ipu_id)
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> Options:
        self.connectionType(enums.ConnectionType.Never)
        self.createOrSet(ipu_version=ipu_version)
        return self

    def anchorTensor(
        self,
        short_name: str,
        long_name: str,
        output_mode=None,
        output_return_period: int | None = 1,
    ):
        self.checkIsFrozen()
        if output_mode != enums.OutputMode.EveryN:
            output_return_period = 1
        self.anchored_tensors[short_name] = [
            long_name,
            output_mode is None,
            output_mode,
            output_return_period,
        ]

    def outputMode(self, output_mode, output_return_period: int | None = None) -> Options:
        assert isinstance(output_mode, enums.OutputMode)
        if output_mode == enums.OutputMode.EveryN:
            assert output_return_period and output_return_period > 0, (
                "EveryN anchor must have output_return_period set to valid positive integer"
            )
        self.set(output_mode=output_mode.value, output_return_period=output_return_period or 1)
        return self

    def defaultOutputMode(self) -> bool:
        return self.output_mode == enums.OutputMode.Default

    def randomSeed(self, random_seed: int) -> Options:
        assert isinstance(random_seed, int)
        torch.manual_seed(random_seed)
        self.createOrSet(random_seed=random_seed)
        return self

    def enableStableNorm(self, enabled: bool) -> Options:
        self._Popart.set("enableStableNorm", enabled)
        return self

    def enableSyntheticData(self, enabled: bool) -> Options:
        self._Popart.set("syntheticDataMode", 2 if enabled else 0)
        return self

    def logCycleCount(self, log_cycle_count: bool) -> Options:
        self._Popart.set("instrumentWithHardwareCycleCounter", log_cycle_count)
        return self

    def enableProfiling(self, profile_dir: str | None = None) -> Options:
        engine = self._popart.options.get("engineOptions", {})
        engine["debug.allowOutOfMemory"] = "true"
        engine["autoReport.directory"] = profile_dir or "."
        engine["autoReport.all"] = "true"
        self._popart.setEngineOptions(engine)
        return self

    def disableModuleNamescope(self) -> Options:
        self._module_namescope_enabled = False
        return self

    def updatableNamedBuffers(self, buffers: list[str]) -> Options:
        self._Popart.set("updatableNamedBuffers", buffers)
        return self

    def toDict(self) -> dict:
        assert not self.defaultOutputMode(), "An output mode must be picked before serialisation"
        out = self._execution_strategy.backendOptions()
        out.update(self._popart.options)
        out = self.update(out)
        out = self._training.update(out)
        out = self._distributed.update(out)
        out = self._tensor_locations.update(out)
        if self._show_compilation_progress_bar:
            out["compilation_progress_bar_fn"] = print  # a callable, as in the real one
        return out

    def clone(self) -> Options:
        return copy.deepcopy(self)

    def __repr__(self):
        props = [p for p in dir(type(self)) if isinstance(getattr(type(self), p), property)]
        return (
            f"{type(self).__name__}("
            + ", ".join(f"{k}={v!r}" for k, v in self._values.items())
            + ", "
            + ", ".join(f"{p}={getattr(self, p)!r}" for p in props)
            + ")"
        )
