"""Search spaces: the domain of every knob, read from TOML, sampled define-by-run.

A knob in a space file is a fixed value (`precision = "16.16"`), a list of choices
(`precision = ["32.32", "16.16"]`) or a range (`{ low = 1, high = 256, log = true }`).
Sampling asks Optuna for knobs in dependency order (topology, then precision, memory,
throughput) and only asks for what applies, so every sampled config passes the rules:
no trial is spent on an invalid one. `params_for` is the inverse: the Optuna parameters
that replay a given Config, for enqueuing the baseline and warm starts (`replay.py`).
The knob kinds and the space files' parsing are `knobs.py`; the layouts a space allows
`layouts.py`; sampling itself `sampling.py`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from ..batch import micro_batch
from ..errors import UsageError
from ..knob_spec import spec
from ..problem import Config, Problem
from ..profiles.model_profile import ModelProfile
from ..profiles.optimum_placement import stage_candidates
from ..profiles.placement import checkpoints_every
from . import layouts, sampling

# Knob kinds and parsing, the replay machinery, layouts and sampling are their own modules;
# these names are re-exported here for the modules that import them with SearchSpace.
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
from .replay import Replay, Suggests, wanted_params
from .sampling import distinct_recompute

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

    # --- topology choices that depend only on the problem (layouts.py) ----------------------

    def ipu_layouts(self, problem: Problem, profile: ModelProfile) -> list[tuple[int, int]]:
        """(ipus_per_replica, replicas) pairs this space allows for the problem."""
        return layouts.ipu_layouts(self.knobs, problem, profile)

    def micro_batches(self, problem: Problem) -> list[int]:
        """Micro-batches this space tries: the problem's alone unless the knob is on."""
        return layouts.micro_batches(self.knobs, problem)

    # --- sampling (sampling.py) -------------------------------------------------------------

    def sample(self, trial: Suggests, problem: Problem, profile: ModelProfile) -> Config:
        """Ask `trial` (an Optuna trial, or a Replay) for a valid Config."""
        return sampling.sample(self.knobs, trial, problem, profile)

    def params_for(
        self, problem: Problem, profile: ModelProfile, config: Config
    ) -> dict[str, Any]:
        """Optuna parameters that make `sample` reproduce `config` (as far as the space
        reaches)."""
        wanted = wanted_params(config, profile, stage_candidates(problem, profile))
        wanted["micro_batch"] = micro_batch(problem, config)
        replay = Replay(wanted)
        self.sample(replay, problem, profile)
        return replay.recorded
