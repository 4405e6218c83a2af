"""`ipu-autotune calibration`: the calibration store (docs/calibration.md).

Shows what it holds per target and SDK (records, fitting ones, models, studies), the
correction fitted on them as the guide would start a new study from it, and that
correction's leave-one-study-out error next to the nominal estimate's. `--forget` removes
the records `--target`/`--sdk`/`--study` name, in one step, and says how many.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from ..backends.targets import TARGETS
from ..calibration.compile_time import fit_compile_time
from ..calibration.prior import fit_prior, loso
from ..calibration.refusal import NoStoreYet
from ..calibration.store import default_url, open_store, summary
from ..errors import UsageError
from ..options import CalibrationOptions
from ..present.display import terminal_cell, terminal_text
from ..study.storage import mask_url


def run(args: CalibrationOptions) -> int:
    if args.target is not None and args.target not in TARGETS:
        raise UsageError(f"unknown target '{args.target}'; use one of {', '.join(TARGETS)}")
    url = args.calibration_storage or default_url(args.storage)
    if url is None:
        raise UsageError(
            f"storage {mask_url(args.storage)} has no calibration store; give "
            "--calibration-storage URL"
        )
    if args.forget and args.target is None and args.sdk is None and args.study is None:
        raise UsageError(
            "--forget removes what --target, --sdk and/or --study name: name at least one "
            "(the whole store is a file or a table you can delete yourself)"
        )
    try:
        store = open_store(url, create=False)
    except NoStoreYet:
        return _empty(args, url)
    try:
        everything, unreadable = store.records()
        if not everything:
            return _empty(args, url)
        chosen = [r for r in everything if _named(r, args)]
        if not chosen:
            raise UsageError(
                f"no record in {mask_url(url)} has {_filters(args)}; it holds "
                + "; ".join(f"{t} {s}" for t, s in sorted(summary(everything)))
            )
        if args.forget:
            gone = store.forget(target=args.target, sdk=args.sdk, study=args.study)
            line = (
                f"forgot {gone} record(s) with {_filters(args)}; "
                f"{len(everything) - gone} remain in {mask_url(url)}"
            )
            print(
                json.dumps({"forgotten": gone, "remaining": len(everything) - gone})
                if args.json
                else terminal_text(line)
            )
            return 0
    finally:
        store.close()
    groups = _groups(chosen)
    if args.json:
        print(
            json.dumps(
                {
                    "store": mask_url(url),
                    "records": len(chosen),
                    "unreadable": unreadable,
                    "groups": groups,
                },
                indent=2,
            )
        )
        return 0
    _show(Console(highlight=False), url, groups, unreadable)
    return 0


def _empty(args: CalibrationOptions, url: str) -> int:
    """Nothing recorded yet is an answer, not bad input: said, exit 0."""
    if args.json:
        print(
            json.dumps(
                {"store": mask_url(url), "records": 0, "unreadable": 0, "groups": []}, indent=2
            )
        )
    else:
        print(terminal_text(f"calibration store {mask_url(url)}"))
        print("is empty (no compile recorded yet): a compiling backend (poptorch) fills it")
    return 0


def _named(r: dict[str, Any], args: CalibrationOptions) -> bool:
    return (
        (args.target is None or r["target"] == args.target)
        and (args.sdk is None or r["sdk"] == args.sdk)
        and (args.study is None or r["study"] == args.study)
    )


def _filters(args: CalibrationOptions) -> str:
    named = [
        f"{k} {v}"
        for k, v in (("target", args.target), ("sdk", args.sdk), ("study", args.study))
        if v
    ]
    return ", ".join(named)


def _groups(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for (target, sdk), s in sorted(summary(records).items()):
        mine = [r for r in records if r["target"] == target and r["sdk"] == sdk]
        prior = fit_prior(mine)
        correction: dict[str, Any] | None = None
        if prior is not None:
            correction = {
                name: {"mean": round(m, 4), "sd": round(sd, 4)}
                for name, (m, sd) in prior.memory.items()
            }
            if prior.memory:
                correction["memory scale"] = prior.memory_scale
            if prior.call is not None:
                correction["device factor"] = round(math.exp(prior.call[0]), 3)
                correction["host factor"] = round(math.exp(prior.call[1]), 3)
        out.append(
            {
                "target": target,
                "sdk": sdk,
                "records": s["records"],
                "fits": s["fits"],
                "models": sorted(s["models"]),
                "studies": sorted(s["studies"]),
                "compile_seconds": _median([r["measured"].get("compile_seconds") for r in mine]),
                "correction": correction,
                "leave_one_study_out": loso(mine),
                "compile_time": _compile_time(mine),
            }
        )
    return out


def _compile_time(records: list[dict[str, Any]]) -> dict[str, float] | None:
    fit = fit_compile_time(records)
    if fit is None:
        return None
    return {
        "seconds_at_1000_ops": round(fit.seconds(1000.0), 1),
        "exponent": round(fit.b, 3),
        "log_spread": round(fit.spread, 3),
        "records": fit.records,
    }


def _median(values: list[object]) -> float | None:
    xs = sorted(v for v in values if isinstance(v, (int, float)))
    return xs[len(xs) // 2] if xs else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _show(console: Console, url: str, groups: list[dict[str, Any]], unreadable: int) -> None:
    table = Table(title=terminal_cell(f"calibration store {mask_url(url)}"), title_justify="left")
    for col in ("target", "SDK", "records", "fit", "models", "studies", "median compile"):
        table.add_column(col, justify="left" if col in ("target", "SDK") else "right")
    for g in groups:
        secs = g["compile_seconds"]
        table.add_row(
            g["target"],
            terminal_cell(g["sdk"]),
            str(g["records"]),
            str(g["fits"]),
            str(len(g["models"])),
            str(len(g["studies"])),
            "-" if secs is None else f"{secs:.0f} s",
        )
    console.print(table)
    for g in groups:
        console.print(
            terminal_text(
                f"{g['target']}, {g['sdk']}: models {', '.join(g['models'])}; "
                f"studies {', '.join(g['studies'])}"
            ),
            soft_wrap=True,
            markup=False,
        )
    if unreadable:
        console.print(
            f"[yellow]{unreadable} stored record(s) unreadable (another format, or hand-edited): "
            "left out[/]"
        )
    for g in groups:
        head = terminal_text(f"{g['target']}, {g['sdk']}")
        c = g["correction"]
        if c is None:
            console.print(f"{head}: nothing to fit (no compile reported its tiles or was timed)")
            continue
        parts = [
            f"{name} {v['mean']:+.3f} ± {v['sd']:.3f}"
            if name != "proportional"
            else f"proportional x{v['mean']:.3f} ± {v['sd']:.3f}"
            for name, v in c.items()
            if isinstance(v, dict) and not name.startswith("category")
        ]
        cats = [
            f"{name.split(' ', 1)[1]} {v['mean']:+.3f}"
            for name, v in c.items()
            if isinstance(v, dict) and name.startswith("category")
        ]
        console.print(
            f"{head}: busiest tile = nominal corrected by "
            + ", ".join(parts)
            + " (fractions of a tile)",
            soft_wrap=True,
        )
        if cats:
            console.print(
                "  per memory category (x its share): " + ", ".join(cats), soft_wrap=True
            )
        if "memory scale" in c:
            how = (
                "read from the studies held out in turn"
                if len(g["studies"]) > 1
                else "one study: the default, nothing to hold out"
            )
            console.print(
                f"  a new model's departure from these parts: {c['memory scale']:g} of the "
                f"default priors' spread ({how})",
                soft_wrap=True,
            )
        if "device factor" in c:
            console.print(
                f"  call time: device x{c['device factor']:.3f}, host x{c['host factor']:.3f} of "
                "nominal"
            )
        t = g["compile_time"]
        if t is not None:
            console.print(
                f"  compile time: {t['seconds_at_1000_ops']:.0f} s at 1,000 ops on the busiest "
                f"stage, x (ops / 1,000)^{t['exponent']:.2f}, spread "
                f"x{math.exp(t['log_spread']):.2f} ({t['records']} compiles)",
                soft_wrap=True,
            )
        e = g["leave_one_study_out"]
        if e is None:
            console.print("  leave-one-study-out error: needs records of 2 studies or more")
            continue
        console.print(
            f"  leave-one-study-out ({e['studies']} studies), median error: busiest tile nominal "
            f"{_pct(e['memory_nominal'])} of a tile, corrected {_pct(e['memory_corrected'])} "
            f"({e['memory_points']} IPUs); throughput nominal {_pct(e['throughput_nominal'])}, "
            f"corrected {_pct(e['throughput_corrected'])} (log error, {e['throughput_points']} "
            "compiles)",
            soft_wrap=True,
        )
