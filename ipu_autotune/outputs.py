"""What a tune run leaves on disk: the trial log, the best config as TOML and as Python,
and for a Hugging Face model the optimum-graphcore `ipu_config.json`."""

from __future__ import annotations

import json
from pathlib import Path

from . import export
from .models.trace import profile_for
from .problem import Problem


def record_json(r) -> dict | None:
    """A trial record as the JSON the trial log, `show --json` and `tune --json` print."""
    if r is None:
        return None
    return {"trial": r.number, "origin": r.origin, "state": r.state, "config": r.config.to_dict(),
            "measurement": r.measurement.to_dict()}


def write_outputs(out_dir: Path, problem: Problem, study_name: str, records, best,
                  notes: list[str], base_global_batch: int | None = None) -> dict[str, Path]:
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
            path.write_text(export.render(fmt, problem, best.config, best.measurement, best.number, study_name,
                                          notes, base_global_batch))
            files["config" if fmt == "toml" else "snippet"] = path
        if problem.model.startswith("hf:"):  # optimum-graphcore users load this with IPUConfig.from_pretrained
            from .export.ipu_config import render_ipu_config

            path = out_dir / "ipu_config.json"
            path.write_text(render_ipu_config(problem, best.config, profile_for(problem))[0])
            files["optimum"] = path
    return files
