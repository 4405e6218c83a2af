"""What the guide may still propose: a config not tried yet that the backend would compile.

A screening backend (backends/screen.py) answers a config the estimate puts far over
memory with the estimator's OOM, without compiling it. Such an answer teaches the guide
nothing, and the next candidate like it would be screened in turn: where no compile has
fitted, a guide that proposed screened candidates could go on without ever compiling again.
So a config the backend would not compile counts as tried.
"""

from __future__ import annotations

from collections.abc import Callable

from ..problem import Config


class Closed:
    """`c in closed`: tried, or one the backend would not compile (`would_compile`, remembered
    in `verdicts` across proposals: the screen's answer for a config does not change)."""

    def __init__(
        self,
        tried: set[Config],
        would_compile: Callable[[Config], bool] | None,
        verdicts: dict[Config, bool],
    ):
        self.tried, self.would_compile, self.verdicts = tried, would_compile, verdicts

    def __contains__(self, config: Config) -> bool:
        if config in self.tried:
            return True
        if self.would_compile is None:
            return False
        verdict = self.verdicts.get(config)
        if verdict is None:
            verdict = self.verdicts[config] = self.would_compile(config)
        return not verdict
