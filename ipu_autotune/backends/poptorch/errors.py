"""Is a PopTorch failure an out-of-memory? The heuristics of the API reference (§3.5), in one
place.

An OOM compile surfaces as `poptorch.Error` with `.type == "popart_exception"` (PopART
rethrows Poplar's graph_memory_allocation_error as its own subclass) and a message starting
"Out of memory: Cannot fit all variable data onto one or more tiles". Messages over 80 lines
are redirected to `./poptorch_error.log`, and PopTorch logs "Out of memory, the graph profile
is available here: ..." at ERROR level. A tile overflow in the profile is the final word.

The error's fields live on the exception *class* (the C++ side sets them there), so they are
the "last error" and must be copied the moment the exception is caught: `CaughtError`.
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OOM_TEXT = "Out of memory"
REDIRECTED = "See poptorch_error.log for details"
ERROR_LOG = "poptorch_error.log"
LOG_MARKER = "Out of memory, the graph profile is available here"


@dataclass(frozen=True)
class CaughtError:
    """A copy of an exception's identity, taken before anything else can raise."""

    cls: str  # e.g. "poptorch.Error", "AssertionError"
    type: str  # poptorch's .type, "" for plain Python exceptions
    message: str  # poptorch's .message, else str(exc)
    text: str  # str(exc): PopTorch's long form with the location stack

    @property
    def is_poptorch(self) -> bool:
        return self.cls.startswith("poptorch.")

    @classmethod
    def from_exception(cls, exc: BaseException, poptorch_module: Any = None) -> CaughtError:
        is_poptorch = poptorch_module is not None and isinstance(exc, poptorch_module.Error)
        name = type(exc).__name__
        if is_poptorch:
            # getattr on the instance falls back to the class, where the C++ side writes.
            etype = str(getattr(exc, "type", "") or "")
            message = str(getattr(exc, "message", "") or "")
            return cls(f"poptorch.{name}", etype, message or str(exc), str(exc))
        return cls(name, "", str(exc), str(exc))

    def summary(self) -> str:
        """One line: 'popart_exception: Out of memory: ...' or 'AssertionError: ...'."""
        head = self.type if self.type else self.cls
        return one_line(f"{head}: {self.message}" if self.message else head)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaughtError:
        return cls(**{k: str(d.get(k, "")) for k in ("cls", "type", "message", "text")})


def oom_evidence(
    error: CaughtError | None,
    error_log_text: str = "",
    log_text: str = "",
    profile_overflow: int = 0,
) -> str | None:
    """What says this failed compile ran out of memory, or None if nothing does.

    Only a PopTorch error can be an OOM: an AssertionError from an option check that happens
    to mention memory is a bug in the options, not a verdict on the configuration.
    """
    if error is None or not error.is_poptorch:
        return None
    if "memory_allocation_error" in error.type:
        return f"error type {error.type}"
    if error.type == "popart_exception" and OOM_TEXT in error.message:
        return "error message"
    if error.message.strip() == REDIRECTED and OOM_TEXT in error_log_text:
        return ERROR_LOG
    if LOG_MARKER in log_text:
        return "PopTorch log"
    if profile_overflow > 0:
        return "tile overflow in profile.pop"
    return None


def read_text(path: Path, limit: int = 2_000_000) -> str:
    """A log file's text, or "" when it is missing or unreadable (never raises)."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def one_line(text: str, limit: int = 240) -> str:
    """The first non-empty line, whitespace collapsed, cut at `limit` characters."""
    for line in str(text).splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def last_line(text: str, limit: int = 200) -> str:
    """The last non-empty line of a log: usually the error a crashed process printed."""
    for line in reversed(str(text).splitlines()):
        if line.strip():
            return one_line(line, limit)
    return ""


def describe_exit(returncode: int) -> str:
    """'died from SIGSEGV' or 'exited with code 3'."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"died from {name}"
    return f"exited with code {returncode}"
