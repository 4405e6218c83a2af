"""What every backend takes and gives back: a narrow interface, like an Optuna sampler's.

A backend turns (Problem, Config) into a Measurement. It never raises for a configuration
that does not fit or does not compile: those are Measurements with a `failure`. It raises
only for problems the user must fix (UsageError) or bugs.
"""

from __future__ import annotations

import abc

# The vocabulary moved to measurement.py (issue 61); re-exported while callers move over.
from ..measurement import (
    CATEGORIES as CATEGORIES,
    FAILURE_KINDS as FAILURE_KINDS,
    SOURCES as SOURCES,
    Measurement as Measurement,
    failed as failed,
    format_bytes as format_bytes,
    per_ipu_overflow as per_ipu_overflow,
)
from ..problem import Config, Problem


class Backend(abc.ABC):
    """Measures configurations. Subclasses: EstimateBackend, PopTorchBackend."""

    name: str = "base"
    #: the Measurement.source this backend normally produces
    source: str = "estimate"

    @abc.abstractmethod
    def measure(self, problem: Problem, config: Config) -> Measurement:
        """Never raises for a config that does not fit or compile; returns a failure instead."""

    def describe(self) -> str:
        return self.name

    def would_compile(self, problem: Problem, config: Config) -> bool:
        """Whether `measure` would compile `config` (False: a screen answers it without a
        compile, backends/screen.py), so a guide never proposes what cannot teach it."""
        return True

    @property
    def sdk(self) -> str | None:
        """The SDK (or model) this backend's figures come from, as the calibration store keys
        its records (docs/calibration.md); None: unknown until a measurement says."""
        return None

    def close(self) -> None:  # noqa: B027 (not abstract: a backend that holds nothing keeps it)
        """Release subprocesses, devices, caches."""
