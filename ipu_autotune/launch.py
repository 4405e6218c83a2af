"""The `ipu-autotune` console script. The command's modules take about a second to import; a
Ctrl-C in that second says that nothing was started (interrupt.py), not a traceback."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        from .interrupt import while_starting

        print(while_starting(argv), file=sys.stderr)
        return 130
    return run(argv)
