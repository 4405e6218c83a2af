"""The options of a run, in one place: what each command takes, and how the command line and
the Python API fill it.

- `table.py`: the option table, one frozen dataclass per command (`TuneOptions`, ...); a field
  is an option's one definition (its default, flags, check and help).
- `shared.py`: what several commands' options share: the defaults, the base class, the
  Problem's flags and the measuring commands'.
- `spec.py`: what a field says about its option (`Spec`) and the helpers that declare one.
- `values.py`: parsing of values: the checks a flag's text goes through.
- `parser.py`: the CLI's parser, generated from the table, and the options from parsed flags.
- `keywords.py`: the Python API's typed options: a call's keywords checked into the options.
- `problem_flags.py`: the Problem the options describe, and the flags that describe it again
  (the resume command).

`Problem` and `Config` are not options: they are the vocabulary every layer speaks
(`ipu_autotune/problem.py`). Only the command layer imports this package.
"""

from .shared import (
    DEFAULT_FIT_CONFIDENCE as DEFAULT_FIT_CONFIDENCE,
    DEFAULT_HEADROOM as DEFAULT_HEADROOM,
    DEFAULT_OUT as DEFAULT_OUT,
    DEFAULT_STORAGE as DEFAULT_STORAGE,
    DEFAULT_TRIALS as DEFAULT_TRIALS,
    CommandOptions as CommandOptions,
    MeasureOptions as MeasureOptions,
    ProblemOptions as ProblemOptions,
)
from .table import (
    OPTIONS as OPTIONS,
    CalibrationOptions as CalibrationOptions,
    EstimateOptions as EstimateOptions,
    ExportOptions as ExportOptions,
    NumericsOptions as NumericsOptions,
    PlanOptions as PlanOptions,
    ReportOptions as ReportOptions,
    ShowOptions as ShowOptions,
    StudiesOptions as StudiesOptions,
    TuneOptions as TuneOptions,
    VerifyOptions as VerifyOptions,
)
