"""One trial as one line: the knobs that differ from the baseline, abbreviated in one place.

The live table, `show` and the plain per-trial log all use these, so a trial reads the same
everywhere and fits 80 columns (details: `show --trial N`). What they return from stored
values is terminal text (display.py): a crafted record's escape sequences are shown, not run.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..backends.base import Measurement
from ..knob_spec import LINE_ORDER, SPEC
from ..problem import Config
from .display import terminal_text

if TYPE_CHECKING:
    from ..study.records import TrialRecord

#: How each Config field is written in a trial line, and in which order: the knob spec's.
#: What changes the program most comes first (layout, precision, batching), the memory levers
#: next, the numerics the advice sets last (they follow the precision, and are the first to go
#: when the line is cut). A field without an abbreviation is written `name=value` at the end,
#: so it is never hidden, only longer.
_ABBREV: dict[str, Any] = {k.name: k.abbrev for k in SPEC if k.abbrev is not None}
_ORDER = LINE_ORDER

#: What a baseline row shows of itself: the knobs a reader needs to place it.
_BASELINE_KNOBS = (
    "ipus_per_replica",
    "replicas",
    "execution",
    "precision",
    "gradient_accumulation",
)


def knob_text(name: str, value: Any) -> str:
    fmt = _ABBREV.get(name)
    if fmt is None:
        shown = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
        return terminal_text(f"{name}={shown}")
    return terminal_text(fmt(value))


def changed_knobs(baseline: Config | None, config: Config) -> str:
    """'16.16 partials:half ga8 di4': the fields of `config` that differ from `baseline`."""
    if baseline is None:
        baseline = Config()
    if config == baseline:
        return "= baseline"
    parts = []
    names = [f.name for f in dataclasses.fields(Config)]
    for name in sorted(names, key=lambda n: _ORDER.index(n) if n in _ORDER else len(_ORDER)):
        value = getattr(config, name)
        if value != getattr(baseline, name) and not _implied(name, config, baseline):
            parts.append(knob_text(name, value))
    return " ".join(parts) or "= baseline"


def _implied(name: str, config: Config, baseline: Config) -> bool:
    """A difference the layout already says: one IPU has no splits or execution mode, and
    an AMP list that only changed length with the IPU count keeps its value."""
    if name in ("execution", "splits") and config.ipus_per_replica == 1:
        return True
    if name == "available_memory_proportion":
        return set(config.available_memory_proportion) == set(baseline.available_memory_proportion)
    return False


def baseline_knobs(config: Config) -> str:
    """'32.32 2ipu pipe ga3': the baseline's own layout, shown on its row."""
    parts = []
    for name in _BASELINE_KNOBS:
        value = getattr(config, name)
        if name == "replicas" and value == 1:
            continue
        if name == "execution" and config.ipus_per_replica == 1:
            continue
        parts.append(knob_text(name, value))
    return " ".join(parts)


def fit_words(line: str, width: int) -> str:
    """`line` cut to `width` columns at a space, with '…' for what is left out: a knob such
    as 'split@layer3.8' is shown whole or not at all, never cut mid-word (a first knob wider
    than the line is cut after one of its list's items)."""
    if len(line) <= width:
        return line
    cut = line.rfind(" ", 0, width - 1)
    if cut > 0:
        return line[:cut] + " …"
    # a first knob longer than the width: its list up to an item's end (split@a,b,…)
    item = max(line.rfind(s, 0, width - 1) for s in ",/")
    return line[: item + 1 if item > 0 else width - 1] + "…"


def short_verdict(m: Measurement) -> str:
    """'fits', 'OOM +312 MB IPU1', 'timeout': at most ~18 characters (Measurement.verdict's
    short form, as terminal text: a stored failure name may hold anything)."""
    return terminal_text(m.verdict(short=True))


def short_label(record: TrialRecord) -> str:
    """A finished trial's label: why the guide chose it (its Proposal's reason, as stored),
    else the first word of its origin."""
    if record.reason:
        return terminal_text(record.reason) + ("!" if "interrupted" in record.origin else "")
    return short_origin(record.origin)


def short_origin(origin: str) -> str:
    """The first word of a trial's origin ('climb', 'fix', 'sampled', 'baseline')."""
    word = origin.split(",")[0].split(" ")[0].rstrip(":")
    return terminal_text(word) + ("!" if "interrupted" in origin else "")


def short_source(source: str) -> str:
    return {"estimate": "est", "compile": "cmp", "run": "run"}.get(source) or terminal_text(
        source
    )[:3]


def short_throughput(m: Measurement) -> str:
    if m.throughput is None or m.failure not in (None, "oom"):
        return "-"
    return f"{m.throughput:,.0f}"
