"""The package's layers: every import (function-level ones included) goes to the importing
package itself or to a lower layer, so no two packages import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fedbench"

# lowest first; packages of one layer do not import each other
LAYERS = (
    {"core"},
    {"data", "models", "algorithms"},
    {"engine"},
    {"config", "tracking"},
    {"runs"},
    {"testing"},  # the public contract kit (fedbench.testing): builds and runs federations
    {"attacks"},
    {"reproduce"},
    {"cli"},
)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


PACKAGES = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}


def package_of(module: str) -> str | None:
    """The fedbench sub-package a module belongs to (None outside them: fedbench.__version__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "fedbench" and parts[1] in PACKAGES else None


def imports_of(path: Path, package: Path = PACKAGE) -> set[str]:
    """The fedbench modules a file imports, anywhere in it (lazy imports count; those under
    `if TYPE_CHECKING:` do not, as they never run)."""
    module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    here = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            found.update(f"{base}.{a.name}" if package_of(f"{base}.{a.name}") and not package_of(base) else base
                         for a in node.names)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from package import module`: the module too
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("fedbench")}


def edges() -> list[tuple[str, str, str]]:
    """(file, its package, imported package) for every import that leaves the file's package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE:
            continue  # fedbench/__init__.py: the lazy facade of the public API (fedbench.run, ...)
        source = path.relative_to(PACKAGE).parts[0]
        for target in imports_of(path):
            pkg = package_of(target)
            if pkg is not None and pkg != source:
                out.append((str(path.relative_to(PACKAGE.parent)), source, pkg))
    return out


def module_of(path: Path, package: Path = PACKAGE) -> str:
    return ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")


def module_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the fedbench modules it imports (an import of a name in a package is an import of the
    package's __init__, unless the name is a module of it). fedbench/__init__.py is left out: the lazy
    facade of the public API, importing runs.api on attribute access only."""
    files = {module_of(p, package): p for p in package.rglob("*.py") if p.parent != package}
    return {m: {t for t in imports_of(p, package) if t in files and t != m} for m, p in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm): each is a circle."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_layer():
    assert PACKAGES == set(RANK), f"packages without a layer: {PACKAGES - set(RANK)}; stale: {set(RANK) - PACKAGES}"


def test_imports_go_down_the_layers_only():
    upward = [f"{f} ({src}) imports fedbench.{dst}" for f, src, dst in edges() if RANK[dst] >= RANK[src]]
    assert not upward, "\n".join(upward)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    # a function-level import is an edge too: the check must be able to fail
    path = PACKAGE / "core" / "errors.py"
    found = imports_of(path)
    assert all(package_of(m) == "core" for m in found), found
    probe = PACKAGE / "core" / "_probe_layers.py"
    probe.write_text("def f():\n    from fedbench.engine import loop\n    from ..cli import app\n")
    try:
        assert {"fedbench.engine", "fedbench.cli"} <= {f"fedbench.{package_of(m)}" for m in imports_of(probe)}
        with pytest.raises(AssertionError, match="core/_probe_layers.py"):
            test_imports_go_down_the_layers_only()
    finally:
        probe.unlink()


def test_no_module_imports_itself_through_others():
    """Within a package too, every name has one home: no circle of modules (config.compose <->
    config.preflight, runs.batched -> runs.build -> runs.batched were two)."""
    found = circles(module_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_circle_check_can_fail(tmp_path):
    package = tmp_path / "fedbench"
    (package / "runs").mkdir(parents=True)
    for name in ("__init__.py", "runs/__init__.py"):
        (package / name).write_text("")
    (package / "runs" / "a.py").write_text("from fedbench.runs.b import g\n")
    (package / "runs" / "b.py").write_text("def g():\n    from fedbench.runs import a\n")
    (package / "runs" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedbench.runs import a\n")
    assert circles(module_graph(package)) == [["fedbench.runs.a", "fedbench.runs.b"]]


@pytest.mark.parametrize("third_party", ["omegaconf", "hydra", "mlflow", "typer", "pandas"])
def test_algorithms_and_core_need_only_torch(third_party):
    for package in ("core", "algorithms", "engine"):
        for path in (PACKAGE / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
            assert third_party not in names, f"{path.relative_to(PACKAGE.parent)} imports {third_party}"
