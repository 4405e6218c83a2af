"""Values as source text for the files an export writes. Only validated values reach them:
module paths must match `rules/model_paths.MODULE_PATH` and are emitted with repr(); numbers
are re-typed; free text (possibly read back from a study database) becomes inert comments."""

from __future__ import annotations

import math

from ..rules.model_paths import MODULE_PATH


def path_literal(path: str) -> str:
    if not isinstance(path, str) or not MODULE_PATH.match(path):
        raise ValueError(f"refusing to export {path!r}: not a module path")
    return repr(path)


def int_literal(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"refusing to export {v!r}: not an integer")
    return str(int(v))


def float_literal(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"refusing to export {v!r}: not a finite number")
    return repr(float(v))


def comment_lines(text: str) -> str:
    """Free text (possibly read back from a study database) as inert comment lines."""
    lines = []
    for line in text.strip().splitlines():
        safe = "".join(ch if ch.isprintable() else " " for ch in line)
        lines.append(f"# {safe}".rstrip())
    return "\n".join(lines) + "\n" if lines else ""
