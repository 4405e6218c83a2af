"""A small TOML writer for our flat [problem]/[config] tables (tomllib only reads)."""

from __future__ import annotations

import json
import math
from typing import Any


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML cannot hold {v}")
        return repr(v)
    if isinstance(v, str):
        # A JSON string is a TOML basic string, except that JSON escapes characters beyond
        # U+FFFF as surrogate pairs, which TOML rejects: keep them literal. DEL must be escaped.
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dumps(tables: dict[str, dict[str, Any]], header: str = "") -> str:
    out = [f"# {line}" if line else "#" for line in header.splitlines()]
    if out:
        out.append("")
    for name, table in tables.items():
        out.append(f"[{name}]")
        for key, value in table.items():
            if value is None:
                continue
            out.append(f"{key} = {_value(value)}")
        out.append("")
    return "\n".join(out)
