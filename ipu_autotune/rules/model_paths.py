"""Split and checkpoint paths: their syntax, and the modules they name in the traced model.

`path_syntax` is one of the config rules (cross_field.CONFIG_RULES); `model_violations` and
`placement_violations` need the model, so `cross_field.violations` runs them only when it is
given the model's module order.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..problem import Config, Problem

if TYPE_CHECKING:
    from ..profiles.model_profile import ModelProfile

# A module path as `nn.Module.get_submodule` takes it: dotted names and list indices.
# "6" is an nn.Sequential child; RegNet names its blocks "block1-0". Exported with repr().
MODULE_PATH = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


def path_syntax(p: Problem, c: Config) -> str | None:
    for kind, paths in (("split", c.splits), ("checkpoint", c.checkpoints)):
        for path in paths:
            if not MODULE_PATH.match(path):
                return f"{kind} '{path}' is not a module path (dotted names, e.g. layer3.8)"
    return None


def model_violations(c: Config, module_order: Sequence[str]) -> list[str]:
    """Splits and checkpoints must name modules of the model; splits in execution order.

    `module_order` lists the model's module paths in the order they first run.
    """
    position = {path: i for i, path in enumerate(module_order)}
    found: list[str] = []

    def unknown(kind: str, path: str) -> str:
        close = difflib.get_close_matches(path, module_order, n=3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        return f"{kind} '{path}' is not a module of the model that runs in the forward pass{hint}"

    previous = 0
    for path in c.splits:
        if path not in position:
            found.append(unknown("split", path))
            continue
        if position[path] <= previous:
            found.append(
                f"split '{path}' is out of execution order or starts the model; "
                "list splits in the order the modules run"
            )
        previous = position[path]
    for path in c.checkpoints:
        if path not in position:
            found.append(unknown("checkpoint", path))
    return found


def placement_violations(c: Config, profile: ModelProfile) -> list[str]:
    """PopTorch begins a stage at any module that runs (`BeginBlock`), in execution order, and
    checkpoints any (`recomputationCheckpoint`); the estimator cuts a layer where one lands
    inside it (profiles/refine.py). Left to refuse, as PopTorch would: a stage with nothing in
    it (model_violations has the rest: a module that does not run, an order that goes back)."""
    from ..profiles.placement import stage_start
    from ..profiles.refine import refined

    fine = refined(profile, c.splits, c.checkpoints)
    starts = [stage_start(fine, path) for path in c.splits]
    if not c.splits or None in starts:
        return []  # a split that does not run is model_violations' to name
    bounds = [0, *starts, len(fine.units)]
    found: list[str] = []
    for k, path in enumerate(c.splits):
        before = fine.units[bounds[k] : bounds[k + 1]]
        after = fine.units[bounds[k + 1] : bounds[k + 2]]
        if not sum(u.ops for u in before):
            where = f"'{c.splits[k - 1]}'" if k else "the model's start"
            found.append(
                f"split '{path}' leaves the stage from {where} with nothing to run; drop one of "
                "the two splits or move this one to a later module"
            )
        elif k == len(c.splits) - 1 and not sum(u.ops for u in after):
            found.append(
                f"split '{path}' begins a last stage with nothing to run; split at an earlier "
                "module"
            )
    return found
