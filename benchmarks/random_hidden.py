"""Hidden IPUs drawn at random from a broad family of structural differences (issue 22).

The two hand-made hidden IPUs (common.HiddenIPU, common.StructuralHiddenIPU) were written
and the guide developed against them, so their figures say little about an IPU nobody here
modelled. Each *draw* here picks its own mechanisms and strengths from MECHANISMS, on top of
the constant perturbation of HiddenIPU (its own key, so no draw shares constants with a
named case). A draw id fixes everything, in every process.

The draw ids come in two disjoint sets (DRAW_SETS): **develop** (10000 on) to develop the
guide against, and **report** (20000 on), run only to report, after development. Never
tune on the report draws.

Like StructuralHiddenIPU, a draw uses only the estimator's outputs (busiest tile per IPU,
breakdown, time parts) and the config's fields, so it follows changes to the estimator.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from common import HiddenIPU, hidden_constants, seeded_random

from ipu_autotune.backends.base import Measurement
from ipu_autotune.backends.estimate import estimate, profile_at_micro_batch
from ipu_autotune.host import pipeline as host
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for

#: draw ids per set: develop on one, report on the other (disjoint ranges, never mixed)
DRAW_SETS = {"develop": 10_000, "report": 20_000}
#: the strength of a mechanism: its effect, as a fraction, where it applies in full
STRENGTH = (0.10, 0.35)
#: chance that a draw includes each mechanism (at least MIN_MECHANISMS are kept)
INCLUDE = 0.4
MIN_MECHANISMS = 3
#: a fixed per-tile cost at full strength and driver, as a share of a tile
FIXED_SHARE = 0.6

#: every mechanism a draw can pick, with what it changes
MECHANISMS = {
    # memory: a fixed cost on every tile (code, exchange buffers, sync state) the estimator
    # lacks, growing with a driver; FIXED_SHARE x strength x the driver x a tile
    "fixed per stage": "fixed bytes per tile, x IPUs per replica / the problem's IPUs",
    "fixed per checkpoint": "fixed bytes per tile, x (recomputation checkpoints + 1) / 4, with "
    "recomputation",
    "fixed per replica": "fixed bytes per tile, x replicas / the problem's IPUs",
    "fixed per op": "fixed bytes per tile, x the IPU's share of the model's ops",
    # memory: a knob saves less (or more) than modelled, differently per layer kind
    "offload saving": "optimizer offload's saving x (1 -+ strength), per layer kind",
    "rts saving": "replicated tensor sharding's saving x (1 -+ strength), per layer kind",
    "half partials saving": "half partials' saving x (1 -+ strength), per layer kind",
    "8-bit I/O saving": "8-bit I/O's saving x (1 -+ strength), per layer kind",
    # memory: the busiest tile's excess differs per kind of op (categories of the breakdown)
    "op-kind imbalance": "busiest tile x (1 + strength x u) per memory category, u in [-0.5, 1]",
    # time
    "pipeline fill/flush": "4 x strength x (stages - 1) extra pipeline cycles per weight update",
    "all-reduce": "all-reduce time x (1 + 3 x strength) or / (1 + 3 x strength)",
    "slow host": "host seconds per sample and per call x (1 + 2 x strength)",
    "worker scaling": "loader worker efficiency x (1 - 1.5 x strength)",
    "overlap": "an overlapped loader still adds 1.5 x strength of the shorter of host and device",
}
MEMORY_KNOBS = {
    "offload saving": ("optimizer_offload", False),
    "rts saving": ("replicated_tensor_sharding", False),
    "half partials saving": ("partials", "float"),
    "8-bit I/O saving": ("eight_bit_io", False),
}


def layer_kind(problem: Problem) -> str:
    """Convolutions or attention: a knob's saving is drawn per kind."""
    return (
        "conv"
        if problem.model.startswith(("resnet", "efficientnet", "mobilenet", "vgg"))
        else "attention"
    )


@dataclass(frozen=True)
class Draw:
    """One hidden IPU's mechanisms: name -> strength; per-kind and per-category factors."""

    draw_id: int
    strengths: dict[str, Any]
    #: (mechanism, layer kind) -> what the knob's saving is multiplied by
    knob_factors: dict[tuple[str, str], Any]
    category: dict[str, Any]  # memory category -> busiest-tile factor ("op-kind imbalance")
    allreduce: float

    def describe(self) -> str:
        return ", ".join(f"{k} {v:.2f}" for k, v in self.strengths.items())


def draw(draw_id: int) -> Draw:
    rng = seeded_random(f"random-hidden-ipu/{draw_id}")
    names = [n for n in MECHANISMS if rng.random() < INCLUDE]
    rest = [n for n in MECHANISMS if n not in names]
    rng.shuffle(rest)
    names += rest[: max(0, MIN_MECHANISMS - len(names))]
    strengths = {n: rng.uniform(*STRENGTH) for n in MECHANISMS if n in names}
    factors = {}
    for n in MEMORY_KNOBS:
        for kind in ("conv", "attention"):
            s = strengths.get(n, 0.0)
            factors[(n, kind)] = 1.0 + (s if rng.random() < 0.5 else -s) * rng.uniform(0.5, 1.0)
    s = strengths.get("op-kind imbalance", 0.0)
    from ipu_autotune.backends.base import CATEGORIES

    category = {c: 1.0 + s * rng.uniform(-0.5, 1.0) for c in CATEGORIES}
    a = strengths.get("all-reduce", 0.0)
    allreduce = (1 + 3 * a) if rng.random() < 0.6 else 1 / (1 + 3 * a)
    return Draw(draw_id, strengths, factors, category, allreduce)


class RandomHiddenIPU(HiddenIPU):
    """A hidden IPU drawn from MECHANISMS by its draw id (see the module's docstring)."""

    name = "hidden-ipu-random"

    def __init__(self, seed: int, noise: float = 0.03, spread: float = 0.3) -> None:
        super().__init__(seed, noise, spread)
        # its own constants: "hidden-ipu/<id>" would share them with a named case's seed
        self.constants, self.factors = hidden_constants(seed + 1_000_000, spread)
        self.draw = draw(seed)

    def _tiles(self, problem: Problem, config: Config, m: Measurement) -> list[int]:
        d, s = self.draw, self.draw.strengths
        tiles = []
        for busiest, parts in zip(
            m.max_tile_bytes, m.breakdown or [{}] * len(m.max_tile_bytes), strict=True
        ):
            total = sum(parts.values())
            scale = (
                sum(v * d.category.get(k, 1.0) for k, v in parts.items()) / total if total else 1.0
            )
            tiles.append(busiest * scale)
        for name, (knob, off) in MEMORY_KNOBS.items():
            if name not in s or getattr(config, knob) == off:
                continue
            without = estimate(
                problem,
                config.replace(**{knob: off}),
                profile_at_micro_batch(problem, config),
                self.constants,
            )
            if len(without.max_tile_bytes) != len(tiles):
                continue
            factor = d.knob_factors[(name, layer_kind(problem))]
            # the saving (without - with, either sign) scaled: less or more than modelled
            tiles = [
                t + (1.0 - factor) * (w - e)
                for t, w, e in zip(tiles, without.max_tile_bytes, m.max_tile_bytes, strict=True)
            ]
        cap = m.tile_capacity_bytes
        ops = [
            sum(u.ops for u in profile_for(problem).units[a : b + 1])
            for a, b in m.details.get("stage_units", [])
        ]
        total_ops = sum(ops) or 1
        checkpointed = config.effective_recompute != "none"
        for i in range(len(tiles)):
            fixed = 0.0
            fixed += s.get("fixed per stage", 0.0) * config.ipus_per_replica / problem.ipus
            fixed += s.get("fixed per checkpoint", 0.0) * (
                (len(config.checkpoints) + 1) / 4 if checkpointed else 0.0
            )
            fixed += s.get("fixed per replica", 0.0) * config.replicas / problem.ipus
            fixed += s.get("fixed per op", 0.0) * (ops[i] / total_ops if i < len(ops) else 1.0)
            tiles[i] += FIXED_SHARE * fixed * cap
        return [int(t) for t in tiles]

    def _device_parts(self, problem: Problem, config: Config, m: Measurement) -> dict[str, float]:
        """Seconds per call on the IPUs, by part (host.end_to_end's `device_parts`)."""
        s, di = self.draw.strengths, config.device_iterations
        parts = m.details["time_parts"]
        compute = parts["compute"]
        stages = len(m.max_tile_bytes) if config.pipelined else 1
        if stages > 1:  # fill and flush: (accumulation + stages - 1) cycles modelled
            cycle = compute / (config.gradient_accumulation + stages - 1)
            compute += 4 * s.get("pipeline fill/flush", 0.0) * (stages - 1) * cycle
        return {
            "device compute": di * compute,
            "weight update": di * parts["weight_update"],
            "all-reduce": di * parts["all_reduce"] * self.draw.allreduce,
            "host call": self.constants.host_call_overhead_s,
        }

    def _host_costs(self, problem: Problem, config: Config) -> host.HostCosts:
        """This IPU's host: the estimator's host costs, slower and scaling worse per the draw."""
        s = self.draw.strengths
        costs = host.host_costs(problem)
        slow = 1 + 2 * s.get("slow host", 0.0)
        return replace(
            costs,
            float_sample_s=costs.float_sample_s * slow,
            uint8_sample_s=costs.uint8_sample_s * slow,
            call_s=costs.call_s * slow,
            worker_efficiency=costs.worker_efficiency * (1 - 1.5 * s.get("worker scaling", 0.0)),
        )

    def _call(self, problem: Problem, config: Config, m: Measurement) -> tuple[float, float]:
        """(seconds per call, samples per call) on this IPU and its host."""
        device = self._device_parts(problem, config, m)
        e2e = host.end_to_end(problem, config, device, self._host_costs(problem, config))
        call = e2e.call_time_s
        if host.overlapped(config):
            call += (
                1.5
                * self.draw.strengths.get("overlap", 0.0)
                * min(e2e.host_input_s, e2e.device_call_s)
            )
        return call, host.samples_per_call(problem, config)

    def evaluate(self, problem: Problem, config: Config) -> Measurement:
        key = (problem, config)
        if key not in self._cache:
            m = estimate(problem, config, profile_at_micro_batch(problem, config), self.constants)
            m.source = "compile"
            tiles = self._tiles(problem, config, m)
            call, samples = self._call(problem, config, m)
            m.details = {}
            m.max_tile_bytes = tiles
            m.feasible = max(tiles) <= m.tile_capacity_bytes
            m.failure = None if m.feasible else "oom"
            if m.feasible:
                j = self.jitter(config)
                m.throughput = samples / call * j
                m.step_time_s = call / config.device_iterations / j
            else:
                m.throughput, m.step_time_s = None, None
                m.reason = "hidden IPU: out of tile memory"
            self._cache[key] = m
        return self._cache[key]


def draw_ids(which: str, count: int, skip: int = 0, sets: dict[str, int] = DRAW_SETS) -> list[int]:
    """`count` ids of a draw set, after its first `skip` (a fresh set once those are seen, or one
    part of a split run). `sets`: a family's sets (knob_hidden.DRAW_SETS; default this one's)."""
    if which not in sets:
        raise ValueError(f"draw set {which!r}: one of {', '.join(sets)}")
    return list(range(sets[which] + skip, sets[which] + skip + count))


def kind_of(draw_id: int) -> str:
    return next(
        k for k, start in sorted(DRAW_SETS.items(), key=lambda t: -t[1]) if draw_id >= start
    )
