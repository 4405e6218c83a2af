"""What a command imports: every `ipu-autotune` is a fresh interpreter, and torch alone is
about 2 s of CPU, torchvision 1.5 s more, transformers 0.7 s. The parser and `--help` need
none of them; tracing a torchvision model needs no transformers."""

import subprocess
import sys
from pathlib import Path


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return set(out.stdout.split())


def test_the_cli_and_its_help_import_no_torch() -> None:
    loaded = _modules_after(
        "import contextlib, io\nfrom ipu_autotune.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['tune', '--help'])"
    )
    assert "ipu_autotune.options" in loaded  # the help was built from the options
    assert not {"torch", "torchvision", "transformers"} & loaded


def test_tracing_a_torchvision_model_imports_no_transformers() -> None:
    loaded = _modules_after(
        "from ipu_autotune.problem import Problem\n"
        "from ipu_autotune.profiles.trace import profile_for\n"
        "assert profile_for(Problem('resnet18', 2, (3, 32, 32))).units"
    )
    assert "torchvision" in loaded and "transformers" not in loaded


def test_reading_a_study_imports_no_torch(tmp_path: Path) -> None:
    """`show`, `studies`, `report` and `export` read what `tune` stored: a CNN's study needs no
    model built or traced, so none of them imports torch (2-3 s of CPU each, before)."""
    from ipu_autotune.cli import main

    url = f"sqlite:///{tmp_path / 's.db'}"
    study = ["--storage", url, "--study", "cnn"]
    assert (
        main(["resnet18", "--batch-size", "8", "--trials", "3", "--seed", "0", "--quiet", *study])
        == 0
    )
    commands = [
        ["show", *study],
        ["show", *study, "--trial", "1", "--json"],
        ["studies", "--storage", url],
        ["report", *study, "--out", str(tmp_path / "report.html")],
        ["export", *study, "--format", "toml"],
        ["export", *study, "--out", str(tmp_path / "snippet.py")],
    ]
    loaded = _modules_after(
        "import contextlib, io\nfrom ipu_autotune.cli import main\nwith "
        "contextlib.redirect_stdout(io.StringIO()), "
        "contextlib.redirect_stderr(io.StringIO()):\n    codes = [main(argv) for argv in "
        f"{commands!r}]\nassert codes == [0] * len(codes), codes"
    )
    assert (tmp_path / "report.html").exists() and "poptorch.Options()" in (
        tmp_path / "snippet.py"
    ).read_text()
    assert "ipu_autotune.commands.export" in loaded  # every command ran in that interpreter
    assert not {"torch", "torchvision", "transformers"} & loaded
