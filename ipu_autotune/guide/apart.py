"""How far apart two configurations are, as the guide judges it: whether the tiles hold the
same program (the knobs that change what the tiles hold: knob_spec's tile_memory), and how
the model is laid out on the IPUs."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..knob_spec import SPEC
from ..problem import Config

_FIELDS = [f.name for f in fields(Config)]
_TILE_MEMORY = [
    i for i, name in enumerate(_FIELDS) if name not in {k.name for k in SPEC if not k.tile_memory}
]


_VALUES: dict[Config, tuple[Any, ...]] = {}


def _values(c: Config) -> tuple[Any, ...]:
    v = _VALUES.get(c)
    if v is None:
        if len(_VALUES) > 200_000:  # bounded: a long study must not grow it forever
            _VALUES.clear()
        v = _VALUES[c] = tuple(getattr(c, f) for f in _FIELDS)
    return v


def memory_distance(a: Config, b: Config) -> int:
    """How many knobs that change what the tiles hold differ (knob_spec's tile_memory): two
    configs that differ only in the host's loader or device iterations hold the same tiles."""
    va, vb = _values(a), _values(b)
    return sum(va[i] != vb[i] for i in _TILE_MEMORY)


def layout(c: Config) -> tuple[Any, ...]:
    """How the model is laid out on the IPUs: the estimator's errors differ most between
    layouts (pipeline stages, replicas, sharding), less between configs of one layout."""
    return c.ipus_per_replica, c.replicas, c.execution
