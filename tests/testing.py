"""What many test files share, in one place (in the style of optuna/testing/storages.py): the
problems they tune and estimate, the command run in-process or as a user runs it, a finished
workshop study, and storage URLs. Importable as `testing` (conftest.py puts tests/ on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TypeVar

import pytest
from conftest_fake_sdk import SMALL_CNN

from ipu_autotune.cli import main
from ipu_autotune.problem import Problem

TESTS = Path(__file__).resolve().parent

T = TypeVar("T")


def not_none(value: T | None) -> T:
    """`value`, which the test's premise says is there (a measurement, a judgement, a fit): the
    check that lets the type checker follow, and a failure that names the broken premise."""
    assert value is not None, "expected a value, got None"
    return value


# --- problems ------------------------------------------------------------------------------------

#: the smallest torchvision problem: ResNet-18, micro-batch 8, every other setting the default
RESNET18 = Problem("resnet18", 8)
#: CIFAR-sized ResNet-18 on one IPU: no pipeline, so the space is the data and numerics knobs
RESNET18_CIFAR_1IPU = Problem("resnet18", 16, (3, 32, 32), ipus=1)
#: CIFAR-sized ResNet-18 with four IPUs to lay out: every layout and split is in the space
RESNET18_CIFAR_4IPU = Problem("resnet18", 8, input_shape=(3, 32, 32), ipus=4)
#: ResNet-50 at 224 on four IPUs with SGD: a pipeline the guide and the sampler both work on
RESNET50_4IPU_SGD = Problem("resnet50", 16, input_shape=(3, 224, 224), ipus=4, optimizer="sgd")
#: ResNet-152 at 224 on two IPUs: far from fitting naively, the benchmark's hardest problem
RESNET152_2IPU = Problem("resnet152", 16, (3, 224, 224), ipus=2)
#: the fake SDK's small CNN (tests/conftest_fake_sdk.py), which the PopTorch backend compiles
SMALL_CNN_CIFAR = Problem(model=SMALL_CNN, batch_size=64, input_shape=(3, 32, 32), num_classes=10)
#: the numerics tests' small CNN (tests/numerics_models.py), with SGD
NUMERICS_CNN_SGD = Problem(
    "numerics_models:small_cnn", 8, input_shape=(3, 16, 16), num_classes=10, optimizer="sgd"
)

# --- the command ---------------------------------------------------------------------------------

#: the workshop problem's study: its baseline does not fit, so a study holds infeasible trials
STUDY = "resnet101-bs64-2ipu-mk2"
TUNE = ["resnet101", "--batch-size", "64", "--seed", "0", "--quiet"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `ipu-autotune ARGV` run in this process: only its own
    output."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_cli_stdout(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """stdout of `ipu-autotune ARGV` run in this process, which must exit 0: tests that read what a
    command computes, not what a process prints, share this process's imports and traces."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err[-2000:]
    return out


def run_cli_process(
    *argv: str, cwd: Path, columns: int = 80, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """`ipu-autotune ARGV` as a user runs it: the installed command, piped, `columns` wide, with
    tests/ importable (for test models such as `numerics_models:small_cnn`); `check`: exit 0."""
    exe = Path(sys.executable).with_name("ipu-autotune")
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [str(exe), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": str(columns), "PYTHONPATH": path},
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


# --- storages ------------------------------------------------------------------------------------

#: the storage kinds a study may live in; "postgres" needs a server (`bash .ci/postgres.sh`)
STORAGE_KINDS = ("sqlite", "journal", "postgres")
POSTGRES_URL = os.environ.get("IPU_AUTOTUNE_TEST_POSTGRES_URL")
NO_POSTGRES = "IPU_AUTOTUNE_TEST_POSTGRES_URL is not set (start one with: bash .ci/postgres.sh)"


def sqlite_url(path: Path | str) -> str:
    return f"sqlite:///{path}"


def storage_url(kind: str, folder: Path) -> str:
    """A fresh storage of `kind` in `folder` (PostgreSQL: the test server's; skipped without
    one)."""
    if kind == "sqlite":
        return sqlite_url(folder / "shared.db")
    if kind == "journal":
        return f"journal:///{folder / 'shared.journal'}"
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    return POSTGRES_URL


def finished_study(folder: Path, trials: int = 14) -> tuple[str, Path]:
    """(storage URL, output folder) of the workshop study run the way a user runs it:
    `tune --out`."""
    url = sqlite_url(folder / "study.db")
    out = folder / "out"
    assert main([*TUNE, "--trials", str(trials), "--storage", url, "--out", str(out)]) == 0
    return url, out
