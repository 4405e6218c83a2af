"""Small modules, each one idea: no module of the package is over 400 lines (issue 15)."""

from pathlib import Path

import ipu_autotune

PACKAGE_DIR = Path(ipu_autotune.__file__).parent
MAX_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    sizes = {
        str(p.relative_to(PACKAGE_DIR.parent)): len(p.read_text().splitlines())
        for p in PACKAGE_DIR.rglob("*.py")
    }
    assert len(sizes) > 50  # the walk found the package, subpackages included
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
