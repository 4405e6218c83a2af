"""What a tune run leaves on disk: the trial log, the best config as TOML and as Python,
and for a Hugging Face model the optimum-graphcore `ipu_config.json`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import export
from ..problem import Config, Problem

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..study.records import TrialRecord


def record_json(r: TrialRecord | None) -> dict[str, Any] | None:
    """A trial record as the JSON the trial log, `show --json` and `tune --json` print."""
    if r is None:
        return None
    return {
        "trial": r.number,
        "origin": r.origin,
        "state": r.state,
        "config": r.config.to_dict(),
        "measurement": r.measurement.to_dict(),
    }


def write_outputs(
    out_dir: Path,
    problem: Problem,
    study_name: str,
    records: Iterable[TrialRecord],
    best: TrialRecord | None,
    notes: list[str],
    base_global_batch: int | None = None,
) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    log = out_dir / "trials.jsonl"
    with log.open("w") as fh:
        for r in records:
            fh.write(json.dumps(record_json(r)) + "\n")
    files["trials"] = log
    if best is not None:
        for fmt, name in (("toml", "best.toml"), ("python", "best_options.py")):
            path = out_dir / name
            path.write_text(
                export.render(
                    fmt,
                    problem,
                    best.config,
                    best.measurement,
                    best.number,
                    study_name,
                    notes,
                    base_global_batch,
                )
            )
            files["config" if fmt == "toml" else "snippet"] = path
        if problem.model.startswith(
            "hf:"
        ):  # optimum-graphcore users load this with IPUConfig.from_pretrained
            files.update(_write_optimum(out_dir, problem, best.config, notes, base_global_batch))
    return files


def _write_optimum(
    out_dir: Path,
    problem: Problem,
    config: Config,
    notes: list[str],
    base_global_batch: int | None,
) -> dict[str, Path]:
    """ipu_config.json and the IPUTrainer code that trains with it (IPUConfig.from_pretrained
    reads the folder), or, when IPUTrainer would train something else, why not."""
    from ..export.ipu_config import NotAnIPUConfig, render_ipu_config
    from ..export.trainer import render_trainer

    # tracing imports torch: `show` without --out never does
    from ..profiles.trace import profile_for

    for stale in ("ipu_config.json", "train_with_optimum.py", "ipu_config_refused.txt"):
        (out_dir / stale).unlink(missing_ok=True)
    try:
        text = render_ipu_config(problem, config, profile_for(problem))
    except NotAnIPUConfig as exc:
        path = out_dir / "ipu_config_refused.txt"
        path.write_text(
            "No ipu_config.json: IPUTrainer would not train the best config as it was estimated.\n"
            + "".join(f"- {r}\n" for r in exc.reasons)
            + exc.fix[0].upper()
            + exc.fix[1:]
            + ".\n"
        )
        return {"optimum": path}
    (out_dir / "ipu_config.json").write_text(text)
    (out_dir / "train_with_optimum.py").write_text(
        render_trainer(problem, config, notes, base_global_batch)
    )
    return {"optimum": out_dir / "ipu_config.json", "trainer": out_dir / "train_with_optimum.py"}


def lr_json(
    problem: Problem, base: TrialRecord | None, best: TrialRecord | None
) -> dict[str, Any] | None:
    """The learning rate the best's recipe scales to, for `tune --json` (None without a best)."""
    from .host_report import learning_rate

    if best is None:
        return None
    lr = learning_rate(problem, base.config if base is not None else None, best.config)
    if lr is None:
        return None
    return {
        "optimizer": lr.optimizer,
        "rule": lr.rule,
        "base_lr": lr.base_lr,
        "base_global_batch": lr.base_global_batch,
        "global_batch": lr.global_batch,
        "lr": lr.lr,
    }


def compile_counts(backend: Backend) -> dict[str, Any] | None:
    """How many candidates were compiled and how many the estimator screened out (this run)."""
    from ..backends.screen import ScreenedBackend

    if not isinstance(backend, ScreenedBackend):
        return None
    return {"run": backend.compiles_run, "saved": backend.compiles_saved}
