"""`estimate` says what the estimate says: fits or OOM by the tile limit, "uncertain" where the
error bar straddles it, and the search's headroom on a line of its own (issue 42)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ipu_autotune.cli import main

# ResNet-18 at micro-batch 41 on one Mk2 IPU: the busiest tile is estimated at about 97% of a tile.
NEAR_THE_LIMIT = """
[problem]
model = "resnet18"
batch_size = 41
input_shape = [3, 224, 224]
num_classes = 1000
optimizer = "sgd"
ipus = 1
target = "mk2"

[config]
precision = "16.16"
ipus_per_replica = 1
replicas = 1
gradient_accumulation = 4
"""


def test_a_config_at_97_percent_of_a_tile_fits_uncertain_and_the_headroom_is_a_line_of_its_own(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    (in_tmp / "c.toml").write_text(NEAR_THE_LIMIT)
    assert main(["estimate", "--config", "c.toml", "--json"]) == 0
    m = json.loads(capsys.readouterr()[0])
    share = m["max_tile_bytes"][0] / m["tile_capacity_bytes"]
    assert 0.95 < share < 1.0 and m["feasible"] and m["straddles_tile_limit"], share

    assert main(["estimate", "--config", "c.toml"]) == 0
    lines = capsys.readouterr()[0].splitlines()
    verdict = next(line for line in lines if line.startswith("verdict: "))
    assert verdict.startswith(f"verdict: fits at {share:.0%} of a tile on IPU0; uncertain:"), (
        verdict
    )
    assert any(line.startswith("the search's 5% headroom would reject it") for line in lines), (
        lines
    )

    # Without the search's headroom, no such line; a wider headroom still does not change the
    # verdict.
    assert main(["estimate", "--config", "c.toml", "--headroom", "0"]) == 0
    assert "headroom would reject" not in capsys.readouterr()[0]
    assert main(["estimate", "--config", "c.toml", "--headroom", "0.2", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["feasible"]


def test_over_the_tile_limit_is_still_oom(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    (in_tmp / "c.toml").write_text(NEAR_THE_LIMIT.replace("batch_size = 41", "batch_size = 48"))
    assert main(["estimate", "--config", "c.toml"]) == 0
    out = capsys.readouterr()[0]
    assert "verdict: OOM by" in out and "headroom would reject" not in out, out
