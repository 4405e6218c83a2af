"""`verify`: does the tuned recipe still train? The baseline's and the tuned configuration's
recipes (as the export writes them) trained side by side on the CPU on the user's data, with the
IPU's FP16 numerics emulated, and a verdict against the baseline's seed-to-seed band.

One module per idea: `emulation` (FP16 rounding and its counts), `recipe`, `samples`, `run`,
`verdict`, `check` (the three runs from two configs). Nothing here reads command-line arguments
(that is `commands/verify.py`). docs/verify.md.
"""

from .check import DEFAULT_STEPS, Plan, estimate_seconds, plan, run_check
from .recipe import Recipe, recipe_for
from .run import RunResult
from .samples import read_samples
from .verdict import ATTR_VERIFY, EXIT_FAILED_CHECK, Verdict, judge

__all__ = ["ATTR_VERIFY", "DEFAULT_STEPS", "EXIT_FAILED_CHECK", "Plan", "Recipe", "RunResult", "Verdict",
           "estimate_seconds", "judge", "plan", "read_samples", "recipe_for", "run_check"]
