"""A finished ipu-autotune study on the estimator, made the way a user makes one."""

from __future__ import annotations

from pathlib import Path

from ipu_autotune.cli import main

#: the workshop problem: its baseline does not fit, so a study holds infeasible trials
STUDY = "resnet101-bs64-2ipu-mk2"
TUNE = ["resnet101", "--batch-size", "64", "--seed", "0", "--quiet"]


def finished_study(folder: Path, trials: int = 14) -> tuple[str, Path]:
    """(storage URL, output folder) of a study run with `tune --out`."""
    url = f"sqlite:///{folder / 'study.db'}"
    out = folder / "out"
    assert main([*TUNE, "--trials", str(trials), "--storage", url, "--out", str(out)]) == 0
    return url, out
