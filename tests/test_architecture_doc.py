"""docs/architecture.md matches the tree: every module path it names exists (issue 15)."""

import re
from pathlib import Path
from typing import Any

from testing import not_none

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
#: `ipu_autotune/x/y.py` (a module) or `ipu_autotune/x/` / `ipu_autotune/x` (a package)
MODULE_PATH = re.compile(r"ipu_autotune(?:/[A-Za-z_][A-Za-z0-9_]*)*(?:\.py)?/?")


def named_paths(text: str) -> set[str]:
    return {m.group(0).rstrip("/") for m in MODULE_PATH.finditer(text)}


def exists(path: str) -> bool:
    target = ROOT / path
    return target.is_file() if path.endswith(".py") else (target / "__init__.py").is_file()


def test_every_module_the_architecture_page_names_exists() -> None:
    paths = named_paths(DOC.read_text())
    assert len(paths) > 30  # the page names the modules, so this test checks something
    assert sorted(p for p in paths if not exists(p)) == []


def test_the_check_catches_a_path_that_is_not_there() -> None:
    paths = named_paths(
        "see `ipu_autotune/study/runner.py`, `ipu_autotune/commands/` and "
        "`ipu_autotune/nowhere.py`"
    )
    assert paths == {
        "ipu_autotune/study/runner.py",
        "ipu_autotune/commands",
        "ipu_autotune/nowhere.py",
    }
    assert [p for p in sorted(paths) if not exists(p)] == ["ipu_autotune/nowhere.py"]


#: "3. **Study** ..." begins layer 3; its text runs to the next numbered item or heading
LAYER_ITEM = re.compile(r"^(\d+)\. \*\*", re.M)


def doc_layers(text: str) -> dict[str, int]:
    """Module or package path (dotted, without `ipu_autotune.`) -> the layer naming it."""
    section = text.split("## The layers, top down", 1)[1].split("\n## ", 1)[0]
    starts = list(LAYER_ITEM.finditer(section))
    layers: dict[str, int] = {}
    for item, following in zip(starts, [*starts[1:], None], strict=True):
        body = section[item.start() : following.start() if following else len(section)]
        for path in named_paths(body):
            dotted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            layers.setdefault(dotted.removeprefix("ipu_autotune").lstrip("."), int(item.group(1)))
    return layers


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of the most specific path the page names that holds `module` (dotted, full)."""
    rel = module.removeprefix("ipu_autotune").lstrip(".")
    holders = [p for p in layers if rel == p or (p and rel.startswith(p + "."))]
    return layers[max(holders, key=len)] if holders else None


def upward_imports(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    return sorted(
        f"{m} (layer {layer_of(m, layers)}) imports {t} (layer {layer_of(t, layers)})"
        for m, targets in graph.items()
        for t in targets
        if not_none(layer_of(t, layers)) < not_none(layer_of(m, layers))
    )


def _package_graph() -> Any:
    from test_import_cycles import PACKAGE_DIR, import_graph, module_files

    return import_graph(module_files(PACKAGE_DIR, "ipu_autotune"))


def test_every_module_has_a_layer_and_no_layer_imports_a_higher_one() -> None:
    layers = doc_layers(DOC.read_text())
    assert len(set(layers.values())) >= 10  # the page's numbered layers were read
    graph = _package_graph()
    assert sorted(m for m in graph if layer_of(m, layers) is None) == []
    assert upward_imports(graph, layers) == []


def test_the_layer_check_catches_an_upward_import() -> None:
    text = (
        "## The layers, top down\n\n1. **Top**: `ipu_autotune/cli.py`, `ipu_autotune/report/`\n"
        "2. **Low**: `ipu_autotune/models/`, `ipu_autotune/report/data.py`\n\n## Next\n"
        "`ipu_autotune/nowhere.py`"
    )
    layers = doc_layers(text)
    assert layers == {"cli": 1, "report": 1, "models": 2, "report.data": 2}
    assert (
        layer_of("ipu_autotune.report.page", layers) == 1
        and layer_of("ipu_autotune.report.data", layers) == 2
    )
    graph = {
        "ipu_autotune.cli": {"ipu_autotune.models.zoo"},
        "ipu_autotune.models.zoo": {"ipu_autotune.cli"},
        "ipu_autotune.report.page": {"ipu_autotune.report.data"},
    }
    assert upward_imports(graph, layers) == [
        "ipu_autotune.models.zoo (layer 2) imports ipu_autotune.cli (layer 1)"
    ]
