"""ipu-autotune: from an out-of-memory PopTorch configuration to a fast one that fits.

From Python (a notebook): `result = ipu_autotune.tune(model, batch_size=64)`, where `model` is an
nn.Module, a function that builds one, or any model string the command line takes; the other
keywords are the command's flags (docs/python-api.md).
"""

from .version import __version__


def tune(model, **options):
    """Run or resume a tuning study; returns a TuneResult (see ipu_autotune.api.tune)."""
    from .api import tune as run

    return run(model, **options)


def estimate(model=None, config=None, **options):
    """One configuration's memory per IPU and throughput; returns an EstimateResult
    (see ipu_autotune.api.estimate)."""
    from .api import estimate as run

    return run(model, config, **options)


def verify(model=None, **options):
    """The tuned recipe trained beside the baseline's on the CPU, FP16 emulated; returns a Verdict
    (see ipu_autotune.api.verify)."""
    from .api import verify as run

    return run(model, **options)


__all__ = ["__version__", "estimate", "tune", "verify"]
