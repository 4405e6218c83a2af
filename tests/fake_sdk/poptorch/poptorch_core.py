"""Stand-in for the C++ extension `poptorch.poptorch_core`: exception classes and the device query.

As in `python/poptorch.cpp`, the exceptions carry no `type`/`message`/`location` until one
is raised, and then these are set on the exception *class* (the "last error"), not on the
instance: code that reads them late sees whatever was raised last.
"""

from __future__ import annotations

import os


class Error(Exception):
    """poptorch.Error (C++ side). Fields are class attributes set at raise time."""


class RecoverableError(Error):
    """Adds `recovery_action` ("FULL_RESET", "IPU_RESET", ...), also on the class."""


class UnrecoverableError(Error):
    pass


def throw(
    cls: type[Error],
    type_: str,
    message: str,
    location: str = "",
    recovery_action: str | None = None,
) -> Error:
    """Build the exception the way the C++ translator does: class fields, then the long text."""
    cls.type = type_
    cls.message = message
    cls.location = location
    if recovery_action is not None and issubclass(cls, RecoverableError):
        cls.recovery_action = recovery_action
    long = f"In fake_poptorch.cpp:1: '{type_}': {message}"
    if location:
        long += f"\nError raised in:\n  [0] {location}"
    return cls(long)


def attached_ipus() -> int:
    """How many IPUs this 'machine' has: FAKE_POPTORCH_IPUS (default 0, no hardware)."""
    try:
        return max(0, int(os.environ.get("FAKE_POPTORCH_IPUS", "0")))
    except ValueError:
        return 0


def ipuHardwareVersion(num_ipus: int = 1) -> int:
    """0 when fewer than `num_ipus` IPUs are attached, else the version
    (FAKE_POPTORCH_IPU_VERSION)."""
    if attached_ipus() < num_ipus:
        return 0
    return int(os.environ.get("FAKE_POPTORCH_IPU_VERSION", "2"))
