"""Every command readable at 80 columns and piped: one line per trial, whole names and figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from testing import not_none, run_cli_process

from ipu_autotune.problem import Config

TRIALS = 5


def too_long(text: str, width: int = 80) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.fixture(scope="module")
def two_studies(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two studies of the same model in one folder, differing only in the optimizer."""
    cwd = tmp_path_factory.mktemp("narrow")
    first = run_cli_process(
        "resnet18",
        "--batch-size",
        "16",
        "--trials",
        str(TRIALS),
        "--seed",
        "0",
        "--no-numerics",
        cwd=cwd,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    second = run_cli_process(
        "resnet18",
        "--batch-size",
        "16",
        "--optimizer",
        "lamb",
        "--trials",
        "2",
        "--seed",
        "0",
        "--no-numerics",
        cwd=cwd,
    )
    assert second.returncode == 0, second.stderr[-2000:]
    return cwd, first, second


def table_rows(text: str) -> list[str]:
    """The lines of the first table's body: after its header rule, up to the blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(line)
    return rows


@pytest.mark.slow
def test_tune_piped_at_80_columns_prints_one_line_per_trial(two_studies: Any) -> None:
    _, first, _ = two_studies
    trial_lines = [line for line in first.stdout.splitlines() if line.startswith("trial ")]
    assert [int(line.split()[1]) for line in trial_lines] == list(range(TRIALS))
    # Everything but the resume command (a command is never broken) fits.
    assert [line for line in too_long(first.stdout + first.stderr) if "resume:" not in line] == []


@pytest.mark.slow
def test_show_at_80_columns_one_line_per_trial(two_studies: Any) -> None:
    cwd, _, _ = two_studies
    out = run_cli_process("show", "--study", "resnet18-bs16-2ipu-mk2", cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert too_long(out.stdout) == []
    rows = table_rows(out.stdout)
    assert len(rows) == TRIALS  # no trial spills onto a second line
    numbers = [int(not_none(re.match(r"\s*(?:★\s*)?(\d+)\s", row)).group(1)) for row in rows]
    assert numbers == list(range(TRIALS))
    assert sum("★" in row for row in rows) == 1
    assert "2ipu pipe 32.32 ga3" in rows[0]  # the baseline row names its own layout


@pytest.mark.slow
def test_show_trial_prints_the_whole_configuration(two_studies: Any) -> None:
    cwd, _, _ = two_studies
    out = run_cli_process("show", "--study", "resnet18-bs16-2ipu-mk2", "--trial", "1", cwd=cwd)
    assert out.returncode == 0, out.stderr
    for key in Config().to_dict():
        assert re.search(rf"^{key}\s", out.stdout, re.M), key
    assert "IPU0" in out.stdout and too_long(out.stdout) == []
    missing = run_cli_process(
        "show", "--study", "resnet18-bs16-2ipu-mk2", "--trial", "99", cwd=cwd
    )
    assert missing.returncode == 2 and "no finished trial 99" in missing.stderr


@pytest.mark.slow
def test_studies_shows_full_names_counts_best_and_state(two_studies: Any) -> None:
    cwd, _, _ = two_studies
    out = run_cli_process("studies", cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert too_long(out.stdout) == []
    rows = {row.split()[0]: row.split()[1:] for row in table_rows(out.stdout)}
    # The optimizer is part of the name, so both studies live side by side, and both names are
    # whole.
    assert set(rows) == {"resnet18-bs16-2ipu-mk2", "resnet18-bs16-2ipu-mk2-lamb"}
    assert rows["resnet18-bs16-2ipu-mk2"][0] == str(TRIALS)
    assert rows["resnet18-bs16-2ipu-mk2-lamb"][0] == "2"
    assert rows["resnet18-bs16-2ipu-mk2"][2] == "fits"
    data = json.loads(run_cli_process("studies", "--json", cwd=cwd).stdout)
    best = {r["study"]: r["best_throughput"] for r in data}
    assert f"{best['resnet18-bs16-2ipu-mk2']:,.0f}" == rows["resnet18-bs16-2ipu-mk2"][1]


@pytest.mark.slow
def test_baseline_on_an_existing_study_is_refused_with_the_fix(
    two_studies: Any, tmp_path: Path
) -> None:
    cwd, _, _ = two_studies
    baseline = tmp_path / "base.toml"
    baseline.write_text(
        '[config]\nprecision = "16.16"\nipus_per_replica = 2\nsplits = ["layer3.0"]\n'
        "gradient_accumulation = 3\n"
    )
    out = run_cli_process(
        "resnet18",
        "--batch-size",
        "16",
        "--trials",
        "1",
        "--no-numerics",
        "--baseline",
        str(baseline),
        cwd=cwd,
    )
    assert out.returncode == 2
    assert (
        "exists" in out.stderr
        and "drop --baseline" in out.stderr
        and "--study NEW_NAME" in out.stderr
    )
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 120])
def test_estimate_has_one_row_per_ipu_and_no_cut_figure(tmp_path: Path, columns: int) -> None:
    out = run_cli_process(
        "estimate", "resnet101", "--batch-size", "64", cwd=tmp_path, columns=columns
    )
    assert out.returncode == 0, out.stderr
    assert too_long(out.stdout, columns) == []
    assert "…" not in out.stdout
    rows = table_rows(out.stdout)
    assert [row.split()[0] for row in rows] == ["IPU0", "IPU1"]
    for row in rows:
        # IPU, seven categories and the total: each a whole figure with its unit; then the tile
        # use.
        figures = re.findall(r"\d+(?:\.\d)? (?:GB|MB|kB|B)\b", row)
        assert len(figures) == 8, row
        assert re.search(r"\d+%\s*$", row), row
    assert "OOM is per tile" in out.stdout


@pytest.mark.slow
def test_numerics_help_lists_only_options_it_uses(tmp_path: Path) -> None:
    out = run_cli_process("numerics", "--help", cwd=tmp_path)
    assert out.returncode == 0
    assert "--ipus" not in out.stdout and "--target" not in out.stdout
    assert "--batch-size" in out.stdout and "--optimizer" in out.stdout and "--seed" in out.stdout


@pytest.mark.slow
def test_set_errors_name_set_not_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[problem]\nmodel = "resnet18"\nbatch_size = 8\n[config]\nprecision = "16.16"\n'
    )
    bad_value = run_cli_process(
        "estimate", "--config", str(cfg), "--set", "precision=17.17", cwd=tmp_path
    )
    assert bad_value.returncode == 2 and "--set: 'precision'" in bad_value.stderr
    assert "c.toml" not in bad_value.stderr
    bad_rule = run_cli_process(
        "estimate", "--config", str(cfg), "--set", "ipus_per_replica=4", cwd=tmp_path
    )
    assert bad_rule.returncode == 2 and "with --set breaks a rule" in bad_rule.stderr
