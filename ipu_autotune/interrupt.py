"""What a Ctrl-C says, whenever it comes: `tune` says how to resume, or that nothing was
started and the command that starts again; any other command says it stopped and can be run
again. Standard library only: the console script's entry (launch.py) says it while the rest
of the package is still being imported."""

from __future__ import annotations

import shlex

#: the commands that are not `tune` (`ipu-autotune MODEL ...` is short for `tune MODEL ...`)
OTHER_COMMANDS = (
    "estimate",
    "plan",
    "export",
    "show",
    "studies",
    "numerics",
    "report",
    "calibration",
    "verify",
)


class Explained(KeyboardInterrupt):
    """A Ctrl-C whose consequence is already printed (tune's resume line): nothing more to say."""


def is_tune(argv: list[str]) -> bool:
    return bool(argv) and (
        argv[0] == "tune" or (not argv[0].startswith("-") and argv[0] not in OTHER_COMMANDS)
    )


def again(argv: list[str]) -> str:
    return shlex.join(["ipu-autotune", *argv])


def while_starting(argv: list[str]) -> str:
    """Stopped while the command's modules were imported: nothing ran yet."""
    if is_tune(argv):
        return f"Interrupted while starting: nothing was started. Run again with:\n  {again(argv)}"
    return "Interrupted while starting: nothing was started."


def while_running(argv: list[str]) -> str:
    """Stopped where the command did not say more itself (tune's own run says how to resume)."""
    if is_tune(argv):
        return f"Interrupted. Run the same command to resume or start the study:\n  {again(argv)}"
    return f"Interrupted: nothing more was done. Run it again with:\n  {again(argv)}"
