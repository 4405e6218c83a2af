"""present/wrap.py: lines that fit a width without breaking a word, a number or a command."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.text import Text

from ipu_autotune.present.wrap import Prose, WholeWords, command_lines, fit_text, prose_lines

AMP = "amp" + "/".join(["0.05"] * 16)


def test_prose_breaks_at_spaces_and_a_long_list_only_after_its_separators() -> None:
    lines = prose_lines(f"Closest: trial 1 (16.16 {AMP} offload ls16)", 40)
    assert all(len(line) <= 40 for line in lines)
    assert "".join(lines).replace(" ", "") == f"Closest:trial1(16.16{AMP}offloadls16)"
    for line in lines:
        for word in line.split():
            assert word.startswith(("amp", "0.05")) or "/" not in word
            assert not word.endswith("0.") and not word.startswith("05")  # no number cut in two
    assert prose_lines("a " + "x" * 45 + " b", 20) == ["a", "x" * 20, "x" * 20, "x" * 5 + " b"]
    assert prose_lines("", 10) == [""]


def test_a_command_is_continued_between_its_words() -> None:
    command = (
        "ipu-autotune hf:configs/gpt2-large --batch-size 1 --ipus 4 --storage "
        "sqlite:///runs/s.db --out out"
    )
    text = command_lines(command, 60, "  resume: ")
    lines = text.splitlines()
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert shlex.split(text.replace("\\\n", " ").removeprefix("  resume: ")) == shlex.split(
        command
    )
    assert (
        command_lines("ipu-autotune resnet101 --batch-size 64", 80, "  resume: ")
        == "  resume: ipu-autotune resnet101 --batch-size 64"
    )


def test_renderables_fit_the_width_they_are_given() -> None:
    console = Console(width=30, record=True, file=None)
    with console.capture() as captured:
        console.print(Prose(f"x {AMP}"))
        console.print(WholeWords("1ipu x2rep 16.16 ga16 di24 split@layer3.8"))
        console.print(fit_text(Text("1ipu x2rep 16.16 ga16 di24 split@layer3.8"), 20))
    lines = captured.get().splitlines()
    assert all(len(line) <= 30 for line in lines)
    assert "1ipu x2rep 16.16 ga16 di24 …" in lines
    assert "1ipu x2rep 16.16 …" in lines
