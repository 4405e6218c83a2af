"""ipu-autotune: from an out-of-memory PopTorch configuration to a fast one that fits.

From Python (a notebook): `result = ipu_autotune.tune(model, batch_size=64)`, where `model` is an
nn.Module, a function that builds one, or any model string the command line takes; the options
are a `TuneOptions` (`ipu_autotune.options`) and/or keywords, its fields by name
(docs/python-api.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .api_result import EstimateResult, TuneResult
    from .options import EstimateOptions, TuneOptions, VerifyOptions
    from .verification.verdict import Verdict


def tune(model: Any, options: TuneOptions | None = None, **keywords: Any) -> TuneResult:
    """Run or resume a tuning study; returns a TuneResult (see ipu_autotune.api.tune)."""
    from .api import tune as run

    return run(model, options, **keywords)


def estimate(
    model: Any = None, config: Any = None, options: EstimateOptions | None = None, **keywords: Any
) -> EstimateResult:
    """One configuration's memory per IPU and throughput; returns an EstimateResult
    (see ipu_autotune.api.estimate)."""
    from .api import estimate as run

    return run(model, config, options, **keywords)


def verify(model: Any = None, options: VerifyOptions | None = None, **keywords: Any) -> Verdict:
    """The tuned recipe trained beside the baseline's on the CPU, FP16 emulated; returns a Verdict
    (see ipu_autotune.api.verify)."""
    from .api import verify as run

    return run(model, options, **keywords)


__all__ = ["__version__", "estimate", "tune", "verify"]
