"""No module of ipu_autotune/ reaches into another module's private names.

A leading underscore says "only this module uses it"; a name another module needs is public
(no underscore). Checked on the source with `ast`, so it holds for code no test imports:
`from x import _y`, and `x._y` where `x` is a project module bound by an import.
(Optuna's private API, which the storages and the sampler use on purpose through
ipu_autotune/optuna_private.py, is not a project module and is held by its own conformance
tests instead.) benchmarks/ and tools/ use the package through its public names only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ipu_autotune"

ROOT = PACKAGE.parent
#: (importing module, "module:name") pairs allowed: none now; an entry must say why
ALLOWED: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name of the module an ImportFrom reads from."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything else (calls, subscripts)."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def private_uses(module: str, path: Path) -> list[str]:
    """Each use of another project module's private name in this module's source."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    bound: dict[str, str] = {}  # local name -> the project module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(module, path, node)
            if source not in MODULES:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:
                    bound[alias.asname or alias.name] = submodule
                elif _is_private(alias.name) and source != module:
                    found.append(f"{source}:{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES or alias.name.split(".")[0] == "ipu_autotune":
                    # `import a.b` binds `a`; `import a.b as c` binds c to a.b
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            chain = _dotted(node.value)
            if chain and chain[0] in bound:
                target = ".".join([bound[chain[0]], *chain[1:]])
                if target in MODULES and target != module:
                    found.append(f"{target}:{node.attr}")
    return sorted(set(found))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_names_of_other_modules(module: str) -> None:
    uses = [use for use in private_uses(module, MODULES[module]) if (module, use) not in ALLOWED]
    assert not uses, f"{module} uses private names of other modules (make them public): {uses}"


#: the scripts beside the package: they use it as a user would, through its public names
SCRIPTS = {
    f"{p.parent.name}.{p.stem}": p
    for folder in ("benchmarks", "tools")
    for p in sorted((ROOT / folder).glob("*.py"))
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_benchmarks_and_tools_use_no_private_name_of_the_package(script: str) -> None:
    uses = private_uses(script, SCRIPTS[script])
    assert not uses, f"{script} uses private names of the package (make them public): {uses}"


def test_a_script_reaching_into_the_package_is_found(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text(
        "from ipu_autotune.guide import warmstart\n"
        "from ipu_autotune.guide.warmstart import single_changes, _hidden\n"
        "warmstart._other(1)\n"
    )
    assert private_uses("benchmarks.bench", script) == [
        "ipu_autotune.guide.warmstart:_hidden",
        "ipu_autotune.guide.warmstart:_other",
    ]


def test_allow_list_is_still_needed() -> None:
    """An entry whose import is gone is dropped, so the list only shrinks."""
    stale = [(m, use) for m, use in ALLOWED if use not in private_uses(m, MODULES[m])]
    assert not stale, f"remove from ALLOWED: {stale}"


def optuna_private_imports(path: Path) -> list[str]:
    """Imports of Optuna's private modules or names (a `_` part) in one file's source."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            parts = (node.module or "").split(".")
            names = [a.name for a in node.names]
            if any(_is_private(p) for p in parts) or any(_is_private(n) for n in names):
                found.append(f"{node.module}:{','.join(names)}")
        elif isinstance(node, ast.Import):
            found += [
                a.name
                for a in node.names
                if a.name.split(".")[0] == "optuna"
                and any(_is_private(p) for p in a.name.split("."))
            ]
    return found


def test_only_the_adapter_imports_optunas_private_api() -> None:
    """Every private Optuna name is reached through ipu_autotune/optuna_private.py, which lists
    each with its reason (issue 61)."""
    adapter = "ipu_autotune.optuna_private"
    assert optuna_private_imports(MODULES[adapter])  # the check reads what it should
    others = {
        m: found
        for m, p in MODULES.items()
        if m != adapter and (found := optuna_private_imports(p))
    }
    assert others == {}
