"""An estimate's error bars as a person reads them (backends/estimate/error_bars.py makes them)."""

from __future__ import annotations

from ..backends.base import Measurement

UNCERTAIN = "uncertain: the error bar straddles the tile limit"


def tile_bars(m: Measurement) -> str:
    """'IPU0 95-135%, IPU1 92-131%': each IPU's busiest tile as a share of a tile, low to high."""
    if not m.max_tile_bytes_interval or not m.tile_capacity_bytes:
        return ""
    cap = m.tile_capacity_bytes
    return ", ".join(
        f"IPU{i} {lo / cap:.0%}-{hi / cap:.0%}"
        for i, (lo, hi) in enumerate(m.max_tile_bytes_interval)
    )


def throughput_bar(m: Measurement) -> str:
    if not m.throughput_interval:
        return ""
    lo, hi = m.throughput_interval
    return f"{lo:,.0f}-{hi:,.0f}/s"


def verdict_note(m: Measurement) -> str:
    """'; uncertain: ...' when the memory error bar holds the tile limit, else ''."""
    return f"; {UNCERTAIN}" if m.straddles_tile_limit else ""


def _busiest(m: Measurement) -> tuple[int, float]:
    """The IPU with the fullest busiest tile, and that tile's share of a tile."""
    worst = max(range(len(m.max_tile_bytes)), key=m.max_tile_bytes.__getitem__)
    return worst, m.max_tile_bytes[worst] / m.tile_capacity_bytes


def fit_share(m: Measurement) -> str:
    """' at 97% of a tile on IPU0' after a 'fits' verdict, else ''."""
    if not (m.feasible and m.max_tile_bytes and m.tile_capacity_bytes):
        return ""
    worst, used = _busiest(m)
    return f" at {used:.0%} of a tile on IPU{worst}"


def headroom_note(m: Measurement, headroom: float) -> str:
    """'the search's 5% headroom would reject it: ...' for a fitting estimate whose busiest tile
    is inside the headroom tune keeps free (tune would not propose it), else ''."""
    if not (m.feasible and headroom > 0 and m.max_tile_bytes and m.tile_capacity_bytes):
        return ""
    worst, used = _busiest(m)
    if used <= 1.0 - headroom:
        return ""
    return (
        f"the search's {headroom:.0%} headroom would reject it: IPU{worst}'s busiest tile at "
        f"{used:.0%} of a tile is over {1 - headroom:.0%} (tune keeps that margin for the "
        "estimate's error; --headroom)"
    )


def line(m: Measurement) -> str:
    """'error bars: busiest tile IPU0 65-93%; throughput 15,565-27,115/s (90%)', or ''."""
    parts = []
    if tile_bars(m):
        parts.append(f"busiest tile {tile_bars(m)}")
    if throughput_bar(m):
        parts.append(f"throughput {throughput_bar(m)} (90%)")
    return "error bars: " + "; ".join(parts) if parts else ""


def summary_line(base: Measurement | None, best: Measurement) -> str:
    """The tune summary's line: the best's bars, and the baseline's if its verdict is uncertain."""
    out = line(best)
    if not out:
        return ""
    out = out.replace("error bars: ", "error bars (docs/estimator.md): best ", 1) + verdict_note(
        best
    )
    if base is not None and base.straddles_tile_limit:
        out += f"; baseline's busiest tile {tile_bars(base)}, {UNCERTAIN}"
    return out


def alternative_line(best: Measurement, alternative_number: int, alternative: Measurement) -> str:
    """'alternative: trial 41, 1.31x the best's throughput, a 81% chance to fit by the error bar
    (under the 90% asked)': what a user gives up by asking for that confidence."""
    assert alternative.throughput is not None and best.throughput is not None  # both trials fit
    ratio = alternative.throughput / best.throughput
    return (
        f"alternative: trial {alternative_number}, {ratio:.2f}x the best's throughput "
        f"(estimated), a {alternative.fit_chance:.0%} chance to fit by the error bar (busiest "
        f"tile {tile_bars(alternative)}), under the {alternative.fit_confidence:.0%} asked "
        "(--fit-confidence)"
    )
