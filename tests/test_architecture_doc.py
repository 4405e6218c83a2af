"""docs/architecture.md matches the tree: every module path it names exists (issue 15)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
#: `ipu_autotune/x/y.py` (a module) or `ipu_autotune/x/` / `ipu_autotune/x` (a package)
MODULE_PATH = re.compile(r"ipu_autotune(?:/[A-Za-z_][A-Za-z0-9_]*)*(?:\.py)?/?")


def named_paths(text: str) -> set[str]:
    return {m.group(0).rstrip("/") for m in MODULE_PATH.finditer(text)}


def exists(path: str) -> bool:
    target = ROOT / path
    return target.is_file() if path.endswith(".py") else (target / "__init__.py").is_file()


def test_every_module_the_architecture_page_names_exists():
    paths = named_paths(DOC.read_text())
    assert len(paths) > 30  # the page names the modules, so this test checks something
    assert sorted(p for p in paths if not exists(p)) == []


def test_the_check_catches_a_path_that_is_not_there():
    paths = named_paths("see `ipu_autotune/study/runner.py`, `ipu_autotune/commands/` and `ipu_autotune/nowhere.py`")
    assert paths == {"ipu_autotune/study/runner.py", "ipu_autotune/commands", "ipu_autotune/nowhere.py"}
    assert [p for p in sorted(paths) if not exists(p)] == ["ipu_autotune/nowhere.py"]
