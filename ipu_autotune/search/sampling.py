"""Sampling a space: a valid Config asked of a trial define-by-run, knob by knob in
dependency order (topology, then precision, memory, throughput), asking only for what
applies, so every sampled config passes the rules. `SearchSpace.sample` is this over its
knobs; a Replay answers the same questions to reproduce a given Config (replay.py).
"""

from __future__ import annotations

from typing import Any

from ..batch import accumulation_for_global_batch
from ..errors import UsageError
from ..host import pipeline as host
from ..knob_spec import SPEC, KnobSpec, applies
from ..models import partition
from ..problem import Config, Problem, effective_recompute
from ..profiles.model_profile import ModelProfile
from ..profiles.optimum_placement import stage_candidates
from ..profiles.placement import checkpoints_every, optimum_checkpoints
from ..profiles.refine import split_grid
from ..rules.cross_field import min_pipeline_accumulation
from . import layouts as topology
from .knobs import Choice, Knob, Range
from .replay import Asker, Suggests


def sample(
    knobs: dict[str, Knob], trial: Suggests, problem: Problem, profile: ModelProfile
) -> Config:
    """Ask `trial` (an Optuna trial, or a Replay) for a valid Config of the space `knobs`."""
    s = Asker(trial, knobs)
    layouts = topology.ipu_layouts(knobs, problem, profile)
    if not layouts:
        raise UsageError(
            "the search space allows no IPU layout for this problem "
            "(check ipus_per_replica, replicas, --ipus and --global-batch)"
        )
    ipr = s.choose("ipus_per_replica", sorted({layout[0] for layout in layouts}))
    replicas = s.choose(
        "replicas" if len({r for i, r in layouts if i == ipr}) > 1 else None,
        sorted({r for i, r in layouts if i == ipr}),
    )
    micro_batches = topology.micro_batches(knobs, problem)
    if problem.global_batch:
        micro_batches = [
            m for m in micro_batches if accumulation_for_global_batch(problem, replicas, m)
        ]
    mb = _ask_micro_batch(knobs, s, micro_batches)
    accumulation = (
        accumulation_for_global_batch(problem, replicas, mb) if problem.global_batch else None
    )
    execution = "pipelined"
    if ipr > 1:
        executions = s.values("execution")
        if accumulation is not None and accumulation < min_pipeline_accumulation(problem, ipr):
            executions = [e for e in executions if e != "pipelined"]  # too few micro-batches
        if (
            problem.token_inputs
            and stage_candidates(problem, profile) is None
            and len(executions) > 1
            and _head_stay_units(profile) < ipr
        ):  # the head stays with the embedding: fewer stages
            executions = [e for e in executions if e != "pipelined"]
        execution = s.choose("execution", executions)
    splits = _sample_splits(
        knobs,
        s,
        ipr,
        profile,
        execution == "pipelined" and problem.token_inputs,
        stage_candidates(problem, profile),
    )

    precision = s.ask("precision")
    half_compute, half_weights = precision.startswith("16."), precision.endswith(".16")
    partials = s.ask("partials") if half_compute else "float"
    stochastic_rounding = s.ask("stochastic_rounding") if half_weights else False
    if half_compute:
        scales = [v for v in s.values("loss_scaling") if half_weights or v != "auto"]
        loss_scaling = s.choose(
            "loss_scaling" if half_weights else "loss_scaling_fp32_weights", scales
        )
    else:
        loss_scaling = 1.0
    layout = Config(ipus_per_replica=ipr, replicas=replicas, execution=execution)
    optimizer_state = (
        s.ask("optimizer_state") if applies("optimizer_state", problem, layout) else "float"
    )
    if (
        problem.trainer == "optimum"
    ):  # IPUTrainer: FP16 accumulators unless fp32 (optimum_target.py)
        optimizer_state = "half" if half_weights else "float"

    pipelined = execution == "pipelined" and ipr > 1
    modes = distinct_recompute(
        [m for m in s.values("recompute") if pipelined or m != "pipeline"], pipelined
    )
    recompute = s.choose("recompute_pipelined" if pipelined else "recompute", modes)
    effective = effective_recompute(recompute, pipelined)
    checkpoints: tuple[str, ...] = ()
    if effective in ("pipeline", "all"):
        every = s.ask("checkpoint_every")
        checkpoints = checkpoints_every(profile, splits, every)
        if problem.trainer == "optimum":  # every layer or none: recompute_checkpoint_every_layer
            checkpoints = optimum_checkpoints(profile) if every else ()
    amp = tuple(
        s.ask("available_memory_proportion", f"available_memory_proportion_ipu{i}")
        for i in range(ipr)
    )
    offload = (
        s.ask("optimizer_offload") if applies("optimizer_offload", problem, layout) else False
    )
    rts = (
        s.ask("replicated_tensor_sharding")
        if applies("replicated_tensor_sharding", problem, layout)
        else False
    )

    if accumulation is None:
        accumulation = max(
            s.ask("gradient_accumulation"), topology.min_accumulation(problem, ipr, execution)
        )
        # The recipe's ceiling on the global batch (rules/cross_field.py, _global_batch_ceiling).
        accumulation = max(1, min(accumulation, problem.max_global_batch // (mb * replicas)))
    device_iterations = s.ask("device_iterations")
    eight_bit_io = s.ask("eight_bit_io") if applies("eight_bit_io", problem, layout) else False
    io_tiles = 0
    if not pipelined:
        io_tiles = s.ask("io_tiles")
        if io_tiles:
            execution = "sharded"
    loader_mode = s.ask("loader_mode")
    loader_workers = s.ask("loader_workers")
    # The knobs that need no other: asked where they apply, their spec's default elsewhere.
    plain = {k.name: _ask_plain(s, k, problem, layout) for k in SPEC if k.sampled}

    config = Config(
        precision=precision,
        partials=partials,
        stochastic_rounding=stochastic_rounding,
        loss_scaling=loss_scaling,
        optimizer_state=optimizer_state,
        ipus_per_replica=ipr,
        replicas=replicas,
        splits=splits,
        execution=execution,
        recompute=recompute,
        checkpoints=checkpoints,
        available_memory_proportion=amp,
        optimizer_offload=offload,
        replicated_tensor_sharding=rts,
        gradient_accumulation=int(accumulation),
        device_iterations=int(device_iterations),
        eight_bit_io=eight_bit_io,
        io_tiles=int(io_tiles),
        loader_mode=loader_mode,
        loader_workers=int(loader_workers),
        micro_batch=None if mb == problem.batch_size else mb,
        **plain,  # None: the problem's
    )
    return _within_one_call(problem, config)


def _within_one_call(problem: Problem, config: Config) -> Config:
    """Device iterations cut to what an epoch and the host memory allow (rules)."""
    per_iteration = host.samples_per_call(problem, config.replace(device_iterations=1))
    by_data = problem.dataset_size // per_iteration
    per_iteration_bytes = host.host_bytes_needed(problem, config.replace(device_iterations=1))
    by_memory = int(problem.host_memory_gb * 1e9 // per_iteration_bytes)
    most = max(1, min(by_data, by_memory))
    if config.device_iterations > most:
        return config.replace(device_iterations=most)
    return config


def _ask_plain(s: Asker, knob: KnobSpec, problem: Problem, layout: Config) -> Any:
    if not knob.applies_to(problem, layout):
        return knob.space_default
    assert knob.usable is not None, f"sampled knob {knob.name} says which values it can take"
    usable = knob.usable(problem)
    return s.choose(
        knob.name, [v for v in s.values(knob.name) if v in usable] or [knob.space_default]
    )


def _ask_micro_batch(knobs: dict[str, Knob], s: Asker, options: list[int]) -> int:
    knob = knobs["micro_batch"]
    if isinstance(knob, Range) and options:
        low, high = min(options), max(options)
        if len(options) == high - low + 1:  # a whole range: let the sampler treat it as ordered
            return s.integer("micro_batch", low, high, log=knob.log)
    chosen: int = s.choose("micro_batch", options)
    return chosen


def _sample_splits(
    knobs: dict[str, Knob],
    s: Asker,
    ipr: int,
    profile: ModelProfile,
    head_stays: bool,
    candidates: list[int] | None = None,
) -> tuple[str, ...]:
    """`head_stays`: pipelined, a head tied to the embedding runs on its stage
    (rules/cross_field.py, _tied_head_split), so no split is drawn at or after the first tied unit.
    `candidates`: the only units a stage may begin at (--trainer optimum: layers,
    profiles/optimum_placement.stage_candidates), drawn by their position in that list."""
    if ipr == 1:
        return ()
    splits = knobs["splits"]
    assert isinstance(splits, Choice)  # knobs.py reads splits as a list of choices
    fixed = splits.values[0]
    if fixed != "search":
        if len(fixed) != ipr - 1:
            raise UsageError(
                f"the search space fixes {len(fixed)} split(s) but samples "
                f"{ipr} IPUs per replica; fix ipus_per_replica too"
            )
        return tuple(fixed)
    if candidates is not None:
        # positions 1..len(candidates) of len(candidates) + 1 slots, stars and bars as below
        raw = [
            s.integer(f"split{i}_of_{ipr}", 1, len(candidates) - ipr + 2) for i in range(ipr - 1)
        ]
        return tuple(profile.units[candidates[b - 1]].path for b in partition.decode(raw))
    grid = split_grid(profile)  # the units, large ones cut into their parts (inside a block)
    units = len(grid.units)
    if head_stays:
        units = next((i for i, u in enumerate(grid.units) if u.placed_with is not None), units)
    raw = [s.integer(f"split{i}_of_{ipr}", 1, units - ipr + 1) for i in range(ipr - 1)]
    return tuple(grid.units[b].path for b in partition.decode(raw))


def distinct_recompute(modes: list[str], pipelined: bool) -> list[str]:
    """One mode per distinct PopART behaviour (the first listed): trials are not spent on
    modes that compile alike (standard, norm_only and all when pipelined)."""
    seen: set[str] = set()
    out = []
    for m in modes:
        if effective_recompute(m, pipelined) not in seen:
            seen.add(effective_recompute(m, pipelined))
            out.append(m)
    return out


def _head_stay_units(profile: ModelProfile) -> int:
    """The units a pipeline whose head stays with the token embedding can split between."""
    grid = split_grid(profile)
    return next(
        (i for i, u in enumerate(grid.units) if u.placed_with is not None), len(grid.units)
    )
