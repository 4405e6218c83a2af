"""Optuna parameter names as people read them (best_params, optuna-dashboard, trials_dataframe).

The sampler keeps its own short keys (one per distinct domain: Optuna refuses one name with
two sets of choices, so recompute with and without a pipeline are two parameters); this
module maps each key to the name stored in the study. Studies written before the rename
hold the old keys: `old_names` finds them so a resume can refuse them cleanly (show,
export and report read any study, from the trials' `record` attribute).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_RENAMED = {
    "recompute_pipelined": "recompute (pipelined)",
    "loss_scaling_fp32_weights": "loss_scaling (fp32 weights)",
}
_SPLIT = re.compile(r"^split(\d+)_of_(\d+)$")
_AMP = re.compile(r"^available_memory_proportion_ipu(\d+)$")


def readable(key: str) -> str:
    """'split0_of_2' -> 'pipeline split 1 (2 IPUs)';
    'recompute_pipelined' -> 'recompute (pipelined)'."""
    if key in _RENAMED:
        return _RENAMED[key]
    if m := _SPLIT.match(key):
        # The value is a block position (stars-and-bars encoded, models/partition.py);
        # the record's config holds the module paths.
        return f"pipeline split {int(m[1]) + 1} ({m[2]} IPUs)"
    if m := _AMP.match(key):
        return f"available_memory_proportion (IPU{m[1]})"
    return key


def old_names(params: Iterable[str]) -> list[str]:
    """Parameter names only a study from before the rename holds."""
    return sorted({p for p in params if readable(p) != p})
