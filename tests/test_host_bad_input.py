"""Issue 11's bad input, through the real CLI: exit 2, one line, nothing written.

A dataset smaller than one micro-batch, a --data that does not import or yields no
samples, a fixed global batch above --max-global-batch, a --baseline whose call needs more
host memory than --host-memory allows.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from test_bad_input import MODEL, db, one_line_error, tune, write  # noqa: F401 (db is a fixture)


def test_dataset_smaller_than_one_micro_batch(capsys: pytest.CaptureFixture[str], db: Any) -> None:
    code, _, err = tune(capsys, db, *MODEL, "--dataset-size", "4")
    one_line_error(
        code, err, "dataset (4 samples) is smaller than one micro-batch (8)", "--batch-size"
    )
    assert not db.exists()


def test_data_that_does_not_import(capsys: pytest.CaptureFixture[str], db: Any) -> None:
    code, _, err = tune(capsys, db, *MODEL, "--data", "no_such_module_q:make")
    one_line_error(code, err, "--data 'no_such_module_q:make'", "cannot import")
    assert not db.exists()


@pytest.mark.parametrize(
    "body",
    [
        "def make():\n    return []\n",
        "import torch\ndef make():\n    return torch.utils.data.TensorDataset("
        "torch.zeros(0, 3, 8, 8), torch.zeros(0, dtype=torch.long))\n",
    ],
    ids=["empty-iterable", "empty-dataset"],
)
def test_data_that_yields_no_samples(
    capsys: pytest.CaptureFixture[str],
    db: Any,
    in_tmp: Any,
    monkeypatch: pytest.MonkeyPatch,
    body: str,
) -> None:
    name = f"empty_data_{abs(hash(body)) % 10**6}"
    write(in_tmp / f"{name}.py", body)
    monkeypatch.syspath_prepend(str(in_tmp))
    code, _, err = tune(capsys, db, *MODEL, "--data", f"{name}:make")
    one_line_error(code, err, f"--data '{name}:make'")
    assert "no samples" in err or "empty dataset" in err
    assert not db.exists()
    sys.modules.pop(name, None)


def test_fixed_global_batch_above_the_ceiling(capsys: pytest.CaptureFixture[str], db: Any) -> None:
    code, _, err = tune(capsys, db, *MODEL, "--global-batch", "4096", "--max-global-batch", "1024")
    one_line_error(
        code, err, "--global-batch 4096 is above the ceiling 1024", "--max-global-batch"
    )
    assert not db.exists()


def test_fixed_global_batch_above_the_default_ceiling(
    capsys: pytest.CaptureFixture[str], db: Any
) -> None:
    code, _, err = tune(capsys, db, *MODEL, "--global-batch", "4096")
    one_line_error(code, err, "above the ceiling 2048")
    assert not db.exists()


def test_baseline_needing_more_host_memory_than_allowed(
    capsys: pytest.CaptureFixture[str], db: Any, in_tmp: Any
) -> None:
    # 8 x 16 x 64 = 8,192 float32 64x64 RGB samples: 0.4 GB per call, above 0.1 GB.
    path = write(
        in_tmp / "base.toml", "[config]\ngradient_accumulation = 16\ndevice_iterations = 64\n"
    )
    code, _, err = tune(
        capsys, db, *MODEL, "--baseline", path, "--host-memory", "0.1", "--dataset-size", "100000"
    )
    one_line_error(code, err, "base.toml breaks a rule", "host memory", "--host-memory 0.1 GB")
    assert not db.exists()


def test_baseline_needing_more_samples_than_an_epoch(
    capsys: pytest.CaptureFixture[str], db: Any, in_tmp: Any
) -> None:
    path = write(
        in_tmp / "base.toml", "[config]\ngradient_accumulation = 16\ndevice_iterations = 512\n"
    )
    code, _, err = tune(capsys, db, *MODEL, "--baseline", path)
    one_line_error(
        code, err, "one call needs 65,536 samples", "dataset has 50,000", "lower device_iterations"
    )
    assert not db.exists()
