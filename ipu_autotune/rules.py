"""The rules every configuration obeys, checked before any backend sees it.

Each rule is a small function returning a message that names the rule and the fix, or
None. `violations` runs them all; `validate` raises the first one as a UsageError.
Model-aware rules (split and checkpoint paths) need the traced model's module list.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

from .errors import UsageError
from .problem import Config, Problem

# A module path as `nn.Module.get_submodule` takes it: dotted names and list indices.
MODULE_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _ipus_available(p: Problem, c: Config) -> str | None:
    if c.total_ipus > p.ipus:
        return (f"the config needs {c.total_ipus} IPUs (ipus_per_replica {c.ipus_per_replica} x "
                f"replicas {c.replicas}) but the problem has {p.ipus}; lower replicas or raise --ipus")
    return None


def _power_of_two(p: Problem, c: Config) -> str | None:
    if not _is_power_of_two(c.total_ipus):
        return (f"the config uses {c.total_ipus} IPUs; on hardware PopTorch reserves a power of two, "
                f"so use ipus_per_replica x replicas in 1, 2, 4, 8, ...")
    return None


def _split_count(p: Problem, c: Config) -> str | None:
    if len(c.splits) != c.ipus_per_replica - 1:
        return (f"{len(c.splits)} split(s) for ipus_per_replica {c.ipus_per_replica}; "
                f"a replica of N IPUs needs N-1 splits")
    return None


def _amp_per_ipu(p: Problem, c: Config) -> str | None:
    amp = c.available_memory_proportion
    if len(amp) != c.ipus_per_replica:
        return (f"available_memory_proportion has {len(amp)} value(s); give one per IPU of a "
                f"replica ({c.ipus_per_replica})")
    for i, a in enumerate(amp):
        if not 0 < a <= 1:
            return f"available_memory_proportion[{i}] = {a} is outside (0, 1]"
    return None


def _pipeline_accumulation(p: Problem, c: Config) -> str | None:
    if c.pipelined:
        need = 2 * c.ipus_per_replica - 1
        if c.gradient_accumulation < need:
            return (f"pipelined training over {c.ipus_per_replica} IPUs needs gradient_accumulation "
                    f">= {need} (2 x IPUs - 1), got {c.gradient_accumulation}")
    return None


def _io_tiles(p: Problem, c: Config) -> str | None:
    if c.io_tiles:
        if c.io_tiles % 2 or not 32 <= c.io_tiles <= 192:
            return f"io_tiles must be 0 or an even number in [32, 192], got {c.io_tiles}"
        if c.execution == "pipelined":
            return "io_tiles need execution = \"sharded\" (overlapped I/O is not supported when pipelined)"
    return None


def _auto_loss_scaling(p: Problem, c: Config) -> str | None:
    if c.loss_scaling == "auto" and not c.half_weights:
        return 'loss_scaling = "auto" needs fp16 weights (precision "16.16")'
    return None


def _sharding_needs_replicas(p: Problem, c: Config) -> str | None:
    if c.replicated_tensor_sharding and c.replicas < 2:
        return "replicated_tensor_sharding needs replicas > 1"
    return None


def _pipeline_recompute(p: Problem, c: Config) -> str | None:
    if c.recompute == "pipeline" and not c.pipelined:
        return 'recompute = "pipeline" only applies to pipelined execution over 2+ IPUs'
    return None


def _global_batch(p: Problem, c: Config) -> str | None:
    if p.global_batch:
        got = p.batch_size * c.gradient_accumulation * c.replicas
        if got != p.global_batch:
            return (f"global batch is fixed at {p.global_batch} but micro-batch {p.batch_size} x "
                    f"accumulation {c.gradient_accumulation} x replicas {c.replicas} = {got}")
    return None


def _eight_bit_needs_images(p: Problem, c: Config) -> str | None:
    if c.eight_bit_io and (p.token_inputs or p.inputs):
        return "eight_bit_io is for uint8 images; this model's inputs are token ids or named inputs"
    return None


def _path_syntax(p: Problem, c: Config) -> str | None:
    for kind, paths in (("split", c.splits), ("checkpoint", c.checkpoints)):
        for path in paths:
            if not MODULE_PATH.match(path):
                return f"{kind} '{path}' is not a module path (dotted names, e.g. layer3.8)"
    return None


CONFIG_RULES: tuple[Callable[[Problem, Config], str | None], ...] = (
    _path_syntax,
    _ipus_available,
    _power_of_two,
    _split_count,
    _amp_per_ipu,
    _pipeline_accumulation,
    _io_tiles,
    _eight_bit_needs_images,
    _auto_loss_scaling,
    _sharding_needs_replicas,
    _pipeline_recompute,
    _global_batch,
)


def model_violations(c: Config, module_order: Sequence[str]) -> list[str]:
    """Splits and checkpoints must name modules of the model; splits in execution order.

    `module_order` lists the model's module paths in the order they first run.
    """
    position = {path: i for i, path in enumerate(module_order)}
    found: list[str] = []

    def unknown(kind: str, path: str) -> str:
        close = difflib.get_close_matches(path, module_order, n=3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        return f"{kind} '{path}' is not a module of the model{hint}"

    previous = 0
    for path in c.splits:
        if path not in position:
            found.append(unknown("split", path))
            continue
        if position[path] <= previous:
            found.append(f"split '{path}' is out of execution order or starts the model; "
                         "list splits in the order the modules run")
        previous = position[path]
    for path in c.checkpoints:
        if path not in position:
            found.append(unknown("checkpoint", path))
    return found


def violations(problem: Problem, config: Config, module_order: Sequence[str] | None = None) -> list[str]:
    found = [msg for rule in CONFIG_RULES if (msg := rule(problem, config))]
    if module_order is not None and not any("module path" in m for m in found):
        found += model_violations(config, module_order)
    return found


def validate(problem: Problem, config: Config, module_order: Sequence[str] | None = None,
             where: str = "config") -> None:
    found = violations(problem, config, module_order)
    if found:
        raise UsageError(f"{where} breaks a rule: {found[0]}")
