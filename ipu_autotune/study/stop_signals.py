"""SIGINT and SIGTERM handled for the length of a `with` block, then the previous handlers
back: the run loop (`runner.Runner.stop_on_signals`) and the `--jobs` watcher
(`parallel.Workers.pass_signals`) both stop this way."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def handled(handler: Callable) -> Iterator[None]:
    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
