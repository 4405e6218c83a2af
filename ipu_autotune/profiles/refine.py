"""A profile cut again where a split or checkpoint lands inside a unit, as PopTorch places it.

`poptorch.BeginBlock` and `recomputationCheckpoint` take any submodule that runs, in
execution order (Graphcore's EfficientNet-B0 configurations split at an MBConv's
`_project_conv`). The estimator's stages are runs of units, so such a unit is cut in two at
the event where the split's module is first entered (a checkpoint: where its module first
returns), and the forward log is attributed again (attribution.attribute). What crosses the cut is
what is live there: every tensor touched before it and read after it, so an MBConv's or a
transformer layer's input, carried by the skip connection to the residual add, crosses with
the partial output. The estimator counts it as the inter-IPU copy and the next stage's
input (stashed there), as PopART copies and stashes it; the IPU before keeps what its ops
saved. Each piece runs where its unit ran (`placed_with`); the last one gives the unit's
output (`checkpointed_outputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .attribution import attribute
from .model_profile import ModelProfile


def stage_start(profile: ModelProfile, path: str) -> int | None:
    """The unit a stage beginning at `path` starts with; None inside a unit (`refined` cuts it)."""
    return _placed(profile, _stage_start, path)


def _stage_start(profile: ModelProfile, path: str) -> int | None:
    units = profile.units
    for i, unit in enumerate(units):
        if unit.path == path:
            return i
    position = {p: i for i, p in enumerate(profile.module_order)}
    q = position.get(path)
    if q is None:
        return None
    starts = sorted((position[u.path], i) for i, u in enumerate(units) if u.path in position)
    for start, i in starts:
        if start >= q:
            # Only containers of the unit may run between the split and the unit's start.
            entered = profile.module_order[q:start]
            inside = all(m == "" or units[i].path.startswith(m + ".") for m in entered)
            return i if inside else None
    return None


def checkpoint_unit(profile: ModelProfile, path: str) -> int | None:
    """The unit whose output a checkpoint at `path` keeps, or None inside a unit."""
    return _placed(profile, _checkpoint_unit, path)


def _placed(
    profile: ModelProfile, find: Callable[[ModelProfile, str], int | None], path: str
) -> int | None:
    """`find(profile, path)`, computed once per profile and kept in its placements."""
    key = (find.__name__, path)
    if key not in profile.placements:
        profile.placements[key] = find(profile, path)
    return profile.placements[key]


def _checkpoint_unit(profile: ModelProfile, path: str) -> int | None:
    last_inside = None
    for i, unit in enumerate(profile.units):
        if unit.path == path or (unit.members and unit.members[-1] == path):
            return i
        if path == "" or unit.path.startswith(path + "."):
            last_inside = i
    return last_inside


def inner_splits(profile: ModelProfile, splits: Iterable[str]) -> list[str]:
    """The splits that begin no unit: modules that run inside one."""
    ran = set(profile.module_order)
    return [p for p in splits if p in ran and stage_start(profile, p) is None]


def inner_checkpoints(profile: ModelProfile, checkpoints: Iterable[str]) -> list[str]:
    """The checkpoints that end no unit: modules that run inside one."""
    ran = set(profile.module_order)
    return [p for p in checkpoints if p in ran and checkpoint_unit(profile, p) is None]


def refined(
    profile: ModelProfile, splits: Iterable[str] = (), checkpoints: Iterable[str] = ()
) -> ModelProfile:
    """`profile` with a unit beginning at each split inside a unit and ending at each checkpoint
    inside one; `profile` itself when there is none (or no log to cut: a profile made by hand)."""
    splits, checkpoints = tuple(splits), tuple(checkpoints)
    # by the paths asked for: the search asks for the same few cuts over and over
    return _kept(
        profile, (ASKED, splits, checkpoints), lambda: _refined(profile, splits, checkpoints)
    )


#: refined's answers by the paths asked for (beside _cut's, by the paths inside units)
ASKED = "asked"


def _refined(
    profile: ModelProfile, splits: tuple[str, ...], checkpoints: tuple[str, ...]
) -> ModelProfile:
    key = (
        tuple(sorted(set(inner_splits(profile, splits)))),
        tuple(sorted(set(inner_checkpoints(profile, checkpoints)))),
    )
    if key == ((), ()) or profile.log is None:
        return profile
    return _kept(profile, key, lambda: _cut(profile, *key))


def _kept(profile: ModelProfile, key: object, make: Callable[[], ModelProfile]) -> ModelProfile:
    """`make()`, computed once per profile and kept in its refinements under `key`."""
    if key not in profile.refinements:
        profile.refinements[key] = make()
    return profile.refinements[key]


def _cut(
    profile: ModelProfile, splits: tuple[str, ...], checkpoints: tuple[str, ...]
) -> ModelProfile:
    import dataclasses

    log = profile.log
    assert log is not None  # refined() cuts only a profile that keeps its trace
    events = log.events
    first_enter: dict[str, int] = {}
    first_exit: dict[str, int] = {}
    for i, event in enumerate(events):
        if event[0] == "enter":
            first_enter.setdefault(event[1], i)
        elif event[0] == "exit":
            first_exit.setdefault(event[1], i)
    cuts = {first_enter[p]: p for p in splits}
    after_checkpoint = {}
    for p in checkpoints:
        if p in first_exit and first_exit[p] + 1 not in cuts:
            cuts[first_exit[p] + 1] = _after(p)
            after_checkpoint[first_exit[p] + 1] = p
    units = attribute(log, cuts)
    live = _live_at(events, sorted(cuts))
    base = {u.path: i for i, u in enumerate(profile.units)}
    begins = sorted([(first_enter[p], p) for p in log.starts] + list(cuts.items()))
    home: list[int] = []  # the base unit each new unit is (a piece of)
    for _, path in begins:
        home.append(base[path] if path in base else home[-1])
    new_index: dict[int, int] = {}
    for k, b in enumerate(home):
        new_index.setdefault(b, k)
    for k, (index, _) in enumerate(begins):
        parent = profile.units[home[k]]
        units[k].placed_with = (
            None if parent.placed_with is None else new_index[parent.placed_with]
        )
        if k + 1 == len(begins) or home[k + 1] != home[k]:  # the piece whose output is the unit's
            units[k].checkpointed_outputs = parent.checkpointed_outputs
        if index not in cuts:
            continue
        crossing, carried_from = live[index]
        head_start = begins[k - 1][0] if k else 0
        units[k].in_bytes = sum(crossing.values())
        units[k].carried_in_bytes = sum(
            n for key, n in crossing.items() if carried_from[key] < head_start
        )
        if index in after_checkpoint:
            units[k - 1].members.append(after_checkpoint[index])  # checkpoint_unit finds it last
    return dataclasses.replace(profile, units=units)


def _after(path: str) -> str:
    """The name of the piece that begins where `path` returns: no module begins it, and no
    export ever writes it (a checkpoint is written at `path` itself)."""
    return f"{path}:after"


def _live_at(
    events: list[Any], cuts: list[int]
) -> dict[int, tuple[dict[int, int], dict[int, int]]]:
    """At each cut: the storages touched before it and read at or after it, with their bytes,
    and the event index each was first touched at."""
    first: dict[int, int] = {}
    last_read: dict[int, int] = {}
    size: dict[int, int] = {}
    for i, event in enumerate(events):
        if event[0] != "use":
            continue
        for key, n in event[1]:
            first.setdefault(key, i)
            last_read[key] = i
            size[key] = n
        for key, n in event[2]:
            first.setdefault(key, i)
            size[key] = n
    out = {}
    for cut in cuts:
        crossing = {
            key: size[key] for key, i in first.items() if i < cut <= last_read.get(key, -1)
        }
        out[cut] = (crossing, first)
    return out


#: a unit holding more than this share of the model's saved activations is large: the search
#: may split inside it (an EfficientNet-B0 MBConv at 112x112 holds 23%)
LARGE_UNIT_SHARE = 1 / 8


#: split_grid's answer, kept with the profile's other refinements
GRID = "split_grid"


def split_grid(profile: ModelProfile) -> ModelProfile:
    """The profile the search draws splits over: every unit, with each large one cut before
    each of its parts but the first (MBConv's `block.1`..`block.3`, a transformer layer's
    attention and MLP), where a stage boundary balances IPUs a whole block cannot."""
    if profile.log is None:
        return profile
    return _kept(
        profile, GRID, lambda: refined(profile, _large_units_parts(profile))
    )  # asked per config


def _large_units_parts(profile: ModelProfile) -> list[str]:
    """Where split_grid cuts: each large unit before each of its parts but the first."""
    total = sum(u.saved_bytes for u in profile.units) or 1
    return [
        p
        for u in profile.units
        if u.saved_bytes > LARGE_UNIT_SHARE * total and u.placed_with is None
        for p in _parts(profile, u.path)[1:]
    ]


def _parts(profile: ModelProfile, path: str) -> list[str]:
    """The modules one level inside `path` that begin with a convolution or matmul, in
    execution order (a norm or a squeeze-excitation would move no real work), looked for
    through a single child holding parameters (MBConv's `block`)."""
    log = profile.log
    assert log is not None  # split_grid() splits only a profile that keeps its trace
    owners = {owner for owner, _, _ in log.params}
    heavy = _begins_heavy(log.events)
    while True:
        depth = path.count(".") + 1 if path else 0
        children = [
            m
            for m in profile.module_order
            if m.startswith(path + ".")
            and m.count(".") == depth
            and any(o == m or o.startswith(m + ".") for o in owners)
        ]
        if len(children) != 1:
            return [m for m in children if m in heavy]
        path = children[0]


def _begins_heavy(events: list[Any]) -> set[str]:
    """Modules whose first op after they are first entered is a convolution or matmul."""
    out: set[str] = set()
    waiting: list[str] = []
    seen: set[str] = set()
    for event in events:
        if event[0] == "enter" and event[1] not in seen:
            seen.add(event[1])
            waiting.append(event[1])
        elif event[0] == "op" and waiting:
            if event[1] in ("conv", "matmul"):
                out.update(waiting)
            waiting = []
    return out
