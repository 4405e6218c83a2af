"""Search spaces: the domain of every knob, read from TOML, sampled define-by-run.

A knob in a space file is a fixed value (`precision = "16.16"`), a list of choices
(`precision = ["32.32", "16.16"]`) or a range (`{ low = 1, high = 256, log = true }`).
Sampling asks Optuna for knobs in dependency order (topology, then precision, memory,
throughput) and only asks for what applies, so every sampled config passes the rules:
no trial is spent on an invalid one. `params_for` is the inverse: the Optuna parameters
that replay a given Config, for enqueuing the baseline and warm starts (`replay.py`).
The knob kinds and the space files' parsing are `knobs.py`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from ..batch import accumulation_for_global_batch, micro_batch
from ..errors import UsageError
from ..host import pipeline as host
from ..knob_spec import SPEC, KnobSpec, applies, spec
from ..models import partition
from ..problem import Config, Problem, effective_recompute
from ..profiles.model_profile import ModelProfile
from ..profiles.optimum_placement import stage_candidates
from ..profiles.placement import checkpoints_every, optimum_checkpoints
from ..profiles.refine import split_grid
from ..rules.cross_field import min_pipeline_accumulation

# Knob kinds and parsing, and the replay machinery, are their own modules; their names are
# re-exported here for the modules that import them with SearchSpace.
from .knobs import (
    KNOBS,
    MICRO_BATCH_SEARCH,
    Choice,
    Knob,
    Range,
    builtin_space_dir,
    builtin_space_path,
    family,
    parse_knob,
    read_space_knobs,
)
from .replay import Asker, Replay, Suggests, wanted_params

__all__ = [
    "KNOBS",
    "MICRO_BATCH_SEARCH",
    "Choice",
    "Knob",
    "Range",
    "SearchSpace",
    "builtin_space_dir",
    "builtin_space_path",
    "checkpoints_every",
    "distinct_recompute",
    "family",
    "wanted_params",
]


class SearchSpace:
    """The knobs of one study. Build with `SearchSpace.load`."""

    def __init__(
        self,
        knobs: dict[str, Knob],
        sources: list[str],
        user_knobs: frozenset[str] = frozenset(),
        domain: dict[str, Knob] | None = None,
        advised: frozenset[str] = frozenset(),
    ):
        self.knobs = knobs  # what the sampler asks
        self.sources = sources
        self.user_knobs = user_knobs  # set by the user's --space file: advice never overrides them
        self.domain = (
            domain if domain is not None else knobs
        )  # what a config may hold (see `outside`)
        self.advised = (
            advised  # not sampled: set by advice (numerics), so any value is in the space
        )
        # what `project` returned as the sampler produced it, with its profile: a replay of
        # the sampler's own output gives it back, so `outside` need not replay it again (not
        # so where advised values were put back: they may change what the sampler asks)
        self._projected: dict[tuple[Problem, Config], ModelProfile] = {}
        # what `project` returned for a config, with the profile it was given: climbs project
        # the same single-knob moves again (the warm starts' two climbs from the same starts)
        self._projections: dict[tuple[Problem, Config], tuple[ModelProfile, Config]] = {}

    def outside(self, problem: Problem, profile: ModelProfile, config: Config) -> list[str]:
        """The knobs of `config` that this space could not have produced (empty: inside).

        The space is what its sampler can produce, so the sampler decides: replay the config's
        own values through `sample` over the full domain (before advice narrowed it) and
        compare. Knobs set by advice (`advised`) take any value: the user left them free.
        """
        if self._projected.get((problem, config)) is profile:
            return []
        replayed = self._replayed(problem, profile, config, nearest=False)
        return [
            f.name
            for f in fields(Config)
            if f.name not in self.advised and getattr(config, f.name) != getattr(replayed, f.name)
        ]

    def project(self, problem: Problem, profile: ModelProfile, config: Config) -> Config:
        """`config` moved into the space: each knob outside takes the nearest allowed value."""
        known = self._projections.get((problem, config))
        if known is not None and known[0] is profile:
            return known[1]
        replayed = self._replayed(problem, profile, config, nearest=True)
        kept = {name: getattr(config, name) for name in self.advised}
        out = replayed.replace(**kept) if kept else replayed
        if len(self._projections) > 200_000:  # bounded: a long study must not grow them forever
            self._projections.clear()
            self._projected.clear()
        self._projections[problem, config] = (profile, out)
        if out == replayed:
            self._projected[problem, out] = profile
        return out

    def _replayed(
        self, problem: Problem, profile: ModelProfile, config: Config, nearest: bool
    ) -> Config:
        full = SearchSpace(self.domain, self.sources, self.user_knobs)
        return full.sample(
            Replay(
                wanted_params(config, profile, stage_candidates(problem, profile)), nearest=nearest
            ),
            problem,
            profile,
        )

    def with_knob(self, name: str, raw: Any, where: str) -> SearchSpace:
        """A copy with one knob set from the command line (a user knob, like --space's)."""
        knobs = dict(self.knobs)
        knobs[name] = parse_knob(name, raw, where)
        return SearchSpace(knobs, self.sources + [where], self.user_knobs | {name})

    def without(self, *names: str) -> SearchSpace:
        """A copy that no longer searches `names` (fixed at their first value), unless the
        user's space set them; the caller fills them in (e.g. from numerics advice)."""
        knobs = dict(self.knobs)
        advised = set(self.advised)
        for name in names:
            knob = knobs[name]
            if name not in self.user_knobs and isinstance(knob, Choice):
                knobs[name] = Choice(knob.values[:1])
                advised.add(name)
        return SearchSpace(knobs, self.sources, self.user_knobs, self.domain, frozenset(advised))

    @classmethod
    def load(cls, problem: Problem, path: str | Path | None = None) -> SearchSpace:
        """default.toml, then the model family's file, then the user's file on top."""
        raw: dict[str, Any] = {}
        origin: dict[str, str] = {}
        sources = []
        # --trainer optimum: optimum.toml narrows the space to what IPUConfig expresses.
        names = ("default", family(problem.model)) + (
            ("optimum",) if problem.trainer == "optimum" else ()
        )
        files = [(builtin_space_path(n), f"search_spaces/{n}.toml") for n in names]
        if path is not None:
            files.append((Path(path), str(path)))
        for file, label in files:
            if file is not files[-1][0] and not file.is_file():
                continue
            knobs = read_space_knobs(file, label)
            raw.update(knobs)
            origin.update(dict.fromkeys(knobs, label))
            sources.append(label)
        knobs = {name: parse_knob(name, value, origin[name]) for name, value in raw.items()}
        for name in KNOBS:  # a knob newer than the space files: its spec's value, not searched
            if name not in knobs and spec(name).space_default is not None:
                knobs[name] = Choice((spec(name).space_default,))
        missing = [k for k in KNOBS if k not in knobs]
        if missing:
            raise UsageError(f"search space lacks knob(s) {', '.join(missing)}")
        user = frozenset(
            k for k, where in origin.items() if path is not None and where == str(path)
        )
        return cls(knobs, sources, user)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, knob in self.knobs.items():
            if isinstance(knob, Range):
                out[name] = {
                    "low": knob.low,
                    "high": knob.high,
                    "log": knob.log,
                    **({"step": knob.step} if knob.step else {}),
                }
            else:
                vals = [list(v) if isinstance(v, tuple) else v for v in knob.values]
                out[name] = vals[0] if len(vals) == 1 else vals
        return out

    # --- topology choices that depend only on the problem ----------------------------------

    def ipu_layouts(self, problem: Problem, profile: ModelProfile) -> list[tuple[int, int]]:
        """(ipus_per_replica, replicas) pairs this space allows for the problem."""
        layouts = []
        starts = stage_candidates(problem, profile)
        per_replica = self.knobs["ipus_per_replica"]
        candidates = (
            per_replica.values
            if isinstance(per_replica, Choice)
            else range(int(per_replica.low), int(per_replica.high) + 1)
        )
        for ipr in candidates:
            if ipr < 1 or ipr & (ipr - 1) or ipr > problem.ipus or ipr > len(profile.units):
                continue
            if starts is not None and ipr - 1 > len(
                starts
            ):  # --trainer optimum: a layer per stage start
                continue
            for r in self._replica_options(problem, ipr):
                if problem.global_batch and not any(
                    accumulation_for_global_batch(problem, r, mb)
                    for mb in self.micro_batches(problem)
                ):
                    continue
                layouts.append((ipr, r))
        return layouts

    def micro_batches(self, problem: Problem) -> list[int]:
        """Micro-batches this space tries: the problem's alone unless the knob is on."""
        knob = self.knobs["micro_batch"]
        if isinstance(knob, Range):
            return [m for m in range(max(1, int(knob.low)), int(knob.high) + 1)]
        if knob.values == ("off",):
            return [problem.batch_size]
        if knob.values == ("search",):
            return [m for m in MICRO_BATCH_SEARCH if m <= problem.dataset_size]
        return [int(m) for m in knob.values]

    def _replica_options(self, problem: Problem, ipr: int) -> list[int]:
        most = problem.ipus // ipr
        most = 1 << (most.bit_length() - 1)  # power of two total IPUs
        knob = self.knobs["replicas"]
        if isinstance(knob, Choice) and knob.values == ("max",):
            return [most]
        if isinstance(knob, Choice):
            return [
                r for r in knob.values if isinstance(r, int) and 1 <= r <= most and not r & (r - 1)
            ]
        return [
            r
            for r in range(max(1, int(knob.low)), min(most, int(knob.high)) + 1)
            if not r & (r - 1)
        ]

    @staticmethod
    def _min_accumulation(problem: Problem, ipr: int, execution: str) -> int:
        return min_pipeline_accumulation(problem, ipr) if execution == "pipelined" else 1

    # --- sampling ---------------------------------------------------------------------------

    def sample(self, trial: Suggests, problem: Problem, profile: ModelProfile) -> Config:
        """Ask `trial` (an Optuna trial, or a Replay) for a valid Config."""
        s = Asker(trial, self.knobs)
        layouts = self.ipu_layouts(problem, profile)
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
        micro_batches = self.micro_batches(problem)
        if problem.global_batch:
            micro_batches = [
                m for m in micro_batches if accumulation_for_global_batch(problem, replicas, m)
            ]
        mb = self._ask_micro_batch(s, micro_batches)
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
        splits = self._sample_splits(
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
            if (
                problem.trainer == "optimum"
            ):  # every layer or none: recompute_checkpoint_every_layer
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
                s.ask("gradient_accumulation"), self._min_accumulation(problem, ipr, execution)
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
        plain = {k.name: self._ask_plain(s, k, problem, layout) for k in SPEC if k.sampled}

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
        return self._within_one_call(problem, config)

    @staticmethod
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

    @staticmethod
    def _ask_plain(s: Asker, knob: KnobSpec, problem: Problem, layout: Config) -> Any:
        if not knob.applies_to(problem, layout):
            return knob.space_default
        assert knob.usable is not None, f"sampled knob {knob.name} says which values it can take"
        usable = knob.usable(problem)
        return s.choose(
            knob.name, [v for v in s.values(knob.name) if v in usable] or [knob.space_default]
        )

    def _ask_micro_batch(self, s: Asker, options: list[int]) -> int:
        knob = self.knobs["micro_batch"]
        if isinstance(knob, Range) and options:
            low, high = min(options), max(options)
            if (
                len(options) == high - low + 1
            ):  # a whole range: let the sampler treat it as ordered
                return s.integer("micro_batch", low, high, log=knob.log)
        chosen: int = s.choose("micro_batch", options)
        return chosen

    def _sample_splits(
        self,
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
        splits = self.knobs["splits"]
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
                s.integer(f"split{i}_of_{ipr}", 1, len(candidates) - ipr + 2)
                for i in range(ipr - 1)
            ]
            return tuple(profile.units[candidates[b - 1]].path for b in partition.decode(raw))
        grid = split_grid(profile)  # the units, large ones cut into their parts (inside a block)
        units = len(grid.units)
        if head_stays:
            units = next((i for i, u in enumerate(grid.units) if u.placed_with is not None), units)
        raw = [s.integer(f"split{i}_of_{ipr}", 1, units - ipr + 1) for i in range(ipr - 1)]
        return tuple(grid.units[b].path for b in partition.decode(raw))

    def params_for(
        self, problem: Problem, profile: ModelProfile, config: Config
    ) -> dict[str, Any]:
        """Optuna parameters that make `sample` reproduce `config` (as far as the space reaches)."""
        wanted = wanted_params(config, profile, stage_candidates(problem, profile))
        wanted["micro_batch"] = micro_batch(problem, config)
        replay = Replay(wanted)
        self.sample(replay, problem, profile)
        return replay.recorded


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
