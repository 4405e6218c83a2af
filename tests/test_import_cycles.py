"""No import cycles between the package's modules.

Reads the source with `ast` (nothing is imported): every `import`/`from ... import`, also
inside functions (a lazy import still closes a circle, it only hides it until run time),
relative ones resolved against the importing module. Imports under `if TYPE_CHECKING:` are
left out: they never run. `from pkg import name` counts as importing `pkg.name` when that
is a module, else `pkg`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import ipu_autotune

PACKAGE_DIR = Path(ipu_autotune.__file__).parent


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under `root` (a package named `package`)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import nodes anywhere in the tree, except under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _all_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import nodes anywhere in the tree, `if TYPE_CHECKING:` included."""
    return (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def import_graph(modules: dict[str, Path], typing_too: bool = False) -> dict[str, set[str]]:
    """module -> the package's modules it imports (`typing_too`: also under TYPE_CHECKING)."""
    graph: dict[str, set[str]] = {}
    walk = _all_imports if typing_too else _imports
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            if node.level:
                # level 1 is the importing module's package (the module itself for an __init__)
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in modules else source)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path that returns to its start) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm; the package is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_cycle_in(group, graph) for group in groups]


def _cycle_in(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{group} is not strongly connected")


def test_the_package_has_no_import_cycle() -> None:
    modules = module_files(PACKAGE_DIR, "ipu_autotune")
    assert "ipu_autotune.cli" in modules and "ipu_autotune.numerics.advice" in modules
    cycles = find_cycles(import_graph(modules))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


#: the command layer: argument parsing and the subcommands; the library below never imports it
#: (the Python API is a command: `ipu_autotune.tune`, exposed by the package itself, parses the
#: CLI's flags; its result object exports through the export command's rendering)
COMMAND_LAYER = {
    "ipu_autotune.cli",
    "ipu_autotune.__main__",
    "ipu_autotune.launch",
    "ipu_autotune",
    "ipu_autotune.api",
    "ipu_autotune.api_result",
    *(
        f"ipu_autotune.{package}{'' if p.stem == '__init__' else '.' + p.stem}"
        for package in ("commands", "options")
        for p in (PACKAGE_DIR / package).glob("*.py")
    ),
}


def test_only_the_command_layer_imports_the_argument_definitions() -> None:
    graph = import_graph(module_files(PACKAGE_DIR, "ipu_autotune"))
    below = {
        m: sorted(targets & COMMAND_LAYER)
        for m, targets in graph.items()
        if m not in COMMAND_LAYER
    }
    assert {m: t for m, t in below.items() if t} == {}
    numerics = [p for p in (PACKAGE_DIR / "numerics").rglob("*.py") if "argparse" in p.read_text()]
    assert numerics == []


def test_the_walk_finds_cycles_through_lazy_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")
    (pkg / "c.py").write_text("def g():\n    from . import a\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .e import x\n"
    )
    (pkg / "e.py").write_text("from .d import y\n")
    (pkg / "f.py").write_text("import pkg.a\nfrom pkg.sub.b import f\n")
    graph = import_graph(module_files(pkg, "pkg"))
    assert graph["pkg.f"] == {"pkg.a", "pkg.sub.b"}
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def package_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The import graph between the package's top-level units: each subpackage is one node
    (`pkg.search.space` counts as `pkg.search`), each module at the root is its own."""

    def unit(module: str) -> str:
        parts = module.split(".")
        return (
            ".".join(parts[:2]) if len(parts) > 1 and f"{package}.{parts[1]}" in graph else module
        )

    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        units.setdefault(unit(module), set()).update(unit(t) for t in targets)
    return {u: targets - {u} for u, targets in units.items()}


def test_no_import_cycle_between_packages() -> None:
    """A file-level walk misses `a/x.py -> b/y.py -> a/z.py`: the folders would no longer be
    layers, though no file imports itself back."""
    graph = package_graph(import_graph(module_files(PACKAGE_DIR, "ipu_autotune")), "ipu_autotune")
    assert {"ipu_autotune.search", "ipu_autotune.guide", "ipu_autotune.cli"} <= set(graph)
    cycles = find_cycles(graph)
    assert not cycles, "cycles between packages: " + "; ".join(" -> ".join(c) for c in cycles)


def _two_packages(tmp_path: Path) -> Path:
    """A package `pkg` with subpackages a and b, whose a/x.py imports b's y."""
    pkg = tmp_path / "pkg"
    for sub in ("a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from ..b import y\n")
    return pkg


def test_a_cycle_between_packages_is_found_though_no_file_cycle_is(tmp_path: Path) -> None:
    pkg = _two_packages(tmp_path)
    (pkg / "b" / "y.py").write_text("def f():\n    from ..a.z import g\n")
    (pkg / "a" / "z.py").write_text("")
    (pkg / "top.py").write_text("from .a import x\n")
    files = import_graph(module_files(pkg, "pkg"))
    assert find_cycles(files) == []
    graph = package_graph(files, "pkg")
    assert graph["pkg.top"] == {"pkg.a"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]


def mutual_pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The pairs of nodes each of which imports the other."""
    return sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, set()))


def test_no_two_packages_import_each_other_typing_imports_included() -> None:
    """A layer below never names one above, not even for a type: the vocabulary (Config,
    Problem, Measurement) sits under every package, so a type is no reason to reach up."""
    graph = package_graph(
        import_graph(module_files(PACKAGE_DIR, "ipu_autotune"), typing_too=True), "ipu_autotune"
    )
    assert {"ipu_autotune.backends", "ipu_autotune.host", "ipu_autotune.measurement"} <= set(graph)
    assert mutual_pairs(graph) == []


def test_a_type_only_import_makes_a_pair(tmp_path: Path) -> None:
    pkg = _two_packages(tmp_path)
    (pkg / "b" / "y.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import x\n"
    )
    modules = module_files(pkg, "pkg")
    assert mutual_pairs(package_graph(import_graph(modules), "pkg")) == []
    assert mutual_pairs(package_graph(import_graph(modules, typing_too=True), "pkg")) == [
        ("pkg.a", "pkg.b")
    ]
