"""A `tune --jobs N` worker process (study/parallel.py):
`python -m ipu_autotune.commands.tune_worker` with its `TuneOptions` pickled on stdin by the tune
run that started it (tune.worker_inputs): the run's own options, one job, its share of the
trials, as a worker. Its options are the object itself, never a command line written out and
parsed again.
"""

from __future__ import annotations

import pickle
import sys
import warnings


def main() -> int:
    from ..study import stop_signals

    stop_signals.catch_early()  # a Ctrl-C passed on while it starts must not be lost
    warnings.filterwarnings("ignore", module="optuna")
    import optuna

    from ..errors import UsageError
    from ..options import TuneOptions
    from .tune import run

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # our own process wrote it (tune's parent, on a pipe): unpickling is safe here
    options = pickle.load(sys.stdin.buffer)
    if not isinstance(options, TuneOptions):
        print(
            f"error: a tune worker reads TuneOptions on stdin, got {type(options).__name__}",
            file=sys.stderr,
        )
        return 2
    try:
        return run(options)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
