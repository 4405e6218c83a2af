"""The README is a user's page, and true: short, free of lab-notebook references, its install
and test commands the ones CI runs, and every output it shows what the command prints.

An output block is a fenced block whose first line is `$ ipu-autotune ...`. The command runs
here at 80 columns, in an empty folder, on the estimate backend, and each line of the block
(but `...`, where the README leaves lines out) must be a line of its output, in order:
lines left out are allowed, lines changed are not.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from testing import run_cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FENCED = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)


def output_blocks() -> list[tuple[list[str], list[str]]]:
    """(the command's argv, the lines shown) of each output block in the README."""
    blocks = []
    for body in FENCED.findall(README):
        lines = body.splitlines()
        if lines and lines[0].startswith("$ ipu-autotune "):
            blocks.append((shlex.split(lines[0][2:])[1:], lines[1:]))
    return blocks


def shown_in_order(shown: list[str], printed: list[str]) -> list[str]:
    """The lines of `shown` (but `...`) not found in `printed` after the line before them."""
    missing, at = [], 0
    printed = [line.rstrip() for line in printed]
    for line in (s.rstrip() for s in shown):
        if line == "...":
            continue
        try:
            at = printed.index(line, at) + 1
        except ValueError:
            missing.append(line)
    return missing


def test_the_readme_is_short_and_free_of_lab_notes() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", README), (
        "a commit hash"
    )
    assert not re.search(r"\b[Ii]ssues? \d+|#\d+\b", README), "an issue number"
    assert not re.search(r"\bdraws? \d{4,}|\d{5}-\d{5}", README), "a draw id"


def test_the_current_performance_figures_fit_one_page() -> None:
    performance = (ROOT / "docs" / "performance.md").read_text()
    assert (
        len(performance.splitlines()) <= 300
    )  # the history is git's: `git log -p -- docs/performance.md`
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", performance), (
        "a commit hash"
    )


def test_the_readme_links_only_docs_that_exist() -> None:
    for path in set(re.findall(r"\bdocs/[\w./-]+\.(?:md|png)", README)):
        assert (ROOT / path).is_file(), path


def test_the_install_and_test_commands_are_the_ones_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    install = README.split("## Install and run")[1].split("\n## ")[0]
    commands = [body.strip() for body in FENCED.findall(install)]
    assert len(commands) == 2 and "pip install" in commands[0] and commands[1].endswith("pytest")
    ran = [
        line.strip().split("&& ", 1)[1]
        if line.strip().startswith(". .venv") and "ipu-autotune" in line
        else line.strip()
        for line in ci.splitlines()
    ]
    for command in commands:
        assert command in ran, f"{command!r} is not a line of .ci/run"


def test_every_output_block_runs_a_command() -> None:
    commands = [argv[:1] for argv, _ in output_blocks()]
    assert ["resnet101"] in commands and ["plan"] in commands


def test_the_check_finds_a_changed_line() -> None:
    assert shown_in_order(["a", "...", "c"], ["a", "b", "c"]) == []
    assert shown_in_order(["a", "c"], ["c", "a"]) == ["c"]
    assert shown_in_order(["a", "b!"], ["a", "b"]) == ["b!"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, shown", output_blocks(), ids=[" ".join(argv) for argv, _ in output_blocks()]
)
def test_the_readme_output_is_what_the_command_prints(
    capsys: pytest.CaptureFixture[str],
    in_tmp: Any,
    monkeypatch: pytest.MonkeyPatch,
    argv: Any,
    shown: Any,
) -> None:
    from ipu_autotune.commands import common, tune_steps

    # the estimate backend, as on a machine without the Poplar SDK, and the command as shown
    for module in (common, tune_steps):
        monkeypatch.setattr(
            module, "resolve_backend_name", lambda name: "estimate" if name == "auto" else name
        )
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err[-2000:]
    missing = shown_in_order(shown, out.splitlines())
    assert missing == [], "the README shows lines the command no longer prints:\n" + "\n".join(
        missing
    )
