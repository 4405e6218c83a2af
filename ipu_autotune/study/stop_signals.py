"""SIGINT and SIGTERM handled for the length of a `with` block, then the previous handlers
back: the run loop (`runner.Runner.stop_on_signals`) and the `--jobs` watcher
(`parallel.Workers.pass_signals`) both stop this way.

A `--jobs` worker can be told to stop while it is still starting (its parent passes a Ctrl-C
on as soon as it comes): a KeyboardInterrupt raised inside a library's import can be lost in
its bare `except`, and the worker would then run its whole share. So a worker `catch_early`s:
a stop signal before its first `handled` block is kept, and that block acts on it at once."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_early: list[int] = []  # stop signals kept by catch_early, for the first handled block
_original: dict[
    signal.Signals, Any
] = {}  # the handlers catch_early replaced, while it is in force


def catch_early() -> None:
    """Until the first `handled` block: keep SIGINT and SIGTERM instead of acting on them."""

    def keep(signum: int, frame: FrameType | None) -> None:
        _early.append(signum)

    for s in STOP_SIGNALS:
        _original.setdefault(s, signal.signal(s, keep))


@contextlib.contextmanager
def handled(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    previous: dict[signal.Signals, Any] = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    previous.update(_original)  # after the block, not catch_early's keeping
    _original.clear()
    while _early:  # told to stop while starting
        handler(_early.pop(0), None)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
