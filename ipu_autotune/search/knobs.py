"""Knobs: the names a search space may set, their kinds (a fixed value, a `Choice` of
values, a `Range`), and reading them from the space files (TOML) with a clear error naming
the file, the knob and the fix. `space.py` builds the `SearchSpace` from them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..knob_spec import SPACE_KNOBS, WORDS, names, spec
from ..parsing import read_toml

KNOBS = SPACE_KNOBS  # the knob spec's (knob_spec.py)
_ALLOWED_VALUES: dict[str, tuple[Any, ...]] = WORDS
_BOOLS = names("bool")
_INTS = names("int")
#: micro-batches `micro_batch = "search"` tries (powers of two)
MICRO_BATCH_SEARCH = tuple(2**i for i in range(10))


@dataclass(frozen=True)
class Choice:
    values: tuple[Any, ...]

    def contains(self, v: Any) -> bool:
        return any(v == x and type(v) is type(x) for x in self.values)


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    log: bool = False
    step: float | None = None
    integer: bool = False

    def contains(self, v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if not self.low <= v <= self.high:
            return False
        if self.step:
            k = (v - self.low) / self.step
            return abs(k - round(k)) < 1e-9
        return not self.integer or float(v).is_integer()


Knob = Choice | Range


def family(model: str) -> str:
    return "transformer" if model.startswith(("vit_", "swin_", "maxvit", "hf:")) else "cnn"


def parse_knob(name: str, raw: Any, where: str) -> Knob:
    if name == "micro_batch" and raw in ("off", "search"):
        return Choice((raw,))
    if name == "splits":
        if raw == "search" or (isinstance(raw, list) and all(isinstance(p, str) for p in raw)):
            return Choice((raw if raw == "search" else tuple(raw),))
        raise UsageError(f'{where}: splits must be "search" or a list of module paths')
    if isinstance(raw, dict):
        unknown = set(raw) - {"low", "high", "log", "step"}
        if unknown or "low" not in raw or "high" not in raw:
            raise UsageError(f"{where}: {name} range needs low and high (and optional log, step)")
        low, high = raw["low"], raw["high"]
        if (
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
            or low > high
        ):
            raise UsageError(f"{where}: {name} range must have numbers low <= high")
        integer = name in _INTS
        if integer and not (float(low).is_integer() and float(high).is_integer()):
            raise UsageError(f"{where}: {name} takes whole numbers")
        if raw.get("log") and low <= 0:
            raise UsageError(f"{where}: {name} log range needs low > 0")
        return Range(low, high, bool(raw.get("log", False)), raw.get("step"), integer)
    values = tuple(raw) if isinstance(raw, list) else (raw,)
    if not values:
        raise UsageError(f"{where}: {name} has no values; give at least one")
    for v in values:
        _check_value(name, v, where)
    if name == "loss_scaling":
        values = tuple(float(v) if not isinstance(v, str) else v for v in values)
    if name == "available_memory_proportion":
        values = tuple(float(v) for v in values)
    return Choice(values)


def _check_value(name: str, v: Any, where: str) -> None:
    bad = UsageError(f"{where}: {name} cannot take {v!r}")
    if name in _ALLOWED_VALUES:
        if v not in _ALLOWED_VALUES[name]:
            raise UsageError(
                f"{where}: {name} cannot take {v!r}; "
                f"choose from {', '.join(map(repr, _ALLOWED_VALUES[name]))}"
            )
    elif name in _BOOLS:
        if not isinstance(v, bool):
            raise bad
    elif name == "replicas" and v == "max":
        return
    elif name in _INTS:
        if isinstance(v, bool) or not isinstance(v, int) or v < spec(name).least:
            raise bad
    elif name == "loss_scaling":
        if not (
            v == "auto" or (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)
        ):
            raise bad
    elif name == "available_memory_proportion":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise bad


def read_space_knobs(path: Path | Any, where: str) -> dict[str, Any]:
    data = read_toml(path, where, "a search space")
    knobs: dict[str, Any] = data.get("knobs", {})
    unknown_tables = set(data) - {"space", "knobs"}
    if unknown_tables:
        raise UsageError(
            f"{where}: unknown table '{sorted(unknown_tables)[0]}' (expected [space], [knobs])"
        )
    for key in knobs:
        if key not in KNOBS:
            hint = difflib.get_close_matches(key, KNOBS, n=1)
            raise UsageError(
                f"{where}: unknown knob '{key}'" + (f"; did you mean '{hint[0]}'?" if hint else "")
            )
    return knobs


def builtin_space_dir() -> Traversable:
    """The built-in spaces: the copy a wheel carries inside the package (setup.py's build_py),
    else the checkout's top-level `search_spaces/` (source tree, editable install)."""
    packaged = resources.files("ipu_autotune").joinpath("search_spaces")
    if packaged.joinpath("default.toml").is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "search_spaces"
    if (checkout / "default.toml").is_file():
        return checkout
    # Never search without the default space: that would be a different tool.
    raise RuntimeError(
        f"the built-in search spaces are missing (looked in {checkout} and in the installed "
        "package); reinstall ipu-autotune"
    )


def builtin_space_path(name: str) -> Traversable:
    return builtin_space_dir().joinpath(f"{name}.toml")
