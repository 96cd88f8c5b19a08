"""Name -> factory registries for algorithms, data sets, partitions and models."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from fedbench.core.errors import ConfigError, unknown_choice
from fedbench.core.origin import qualified_name

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of factories; each entry carries a one-line description for `fedbench list`.

    With `package`, the registry fills itself on first use by importing every module of that
    package (each registers on import), so importing one light module of it costs nothing more.
    """

    def __init__(self, kind: str, package: str | None = None):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._descriptions: dict[str, str] = {}
        self._package = package
        self._adopted: dict[str, str] = {}  # name -> the import path of a plugin's object (config.plugins)

    def _fill(self) -> None:
        if self._package is not None:
            import importlib
            import pkgutil

            package, self._package = importlib.import_module(self._package), None
            for module in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"{package.__name__}.{module.name}")

    def register(self, name: str, description: str = "") -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._entries[name] = obj
            doc = description or (getattr(obj, "__doc__", None) or "").strip().splitlines()[0:1]
            self._descriptions[name] = doc if isinstance(doc, str) else (doc[0] if doc else "")
            return obj

        return deco

    def adopt(self, name: str, obj: T, target: str) -> None:
        """Add a plugin's object (named by import path, `target`) under `name`; again with the same object
        is nothing. A name taken by another object raises ConfigError: one name means one thing."""
        self._fill()
        held = self._entries.get(name)
        if held is obj:
            return
        if held is not None:
            owner = self._adopted.get(name) or qualified_name(held)
            raise ConfigError(f"{self.kind}.name={name} with {self.kind}._target_={target}: the name {name!r} is taken by "
                              f"{owner}; give yours a name of its own (name: in its yaml)")
        self._entries[name] = obj
        self._adopted[name] = target
        doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
        self._descriptions[name] = doc[0] if doc else ""

    def forget_adopted(self) -> None:
        """Drop the adopted plugins, so that one test's plugins do not reach the next test's messages."""
        for name in self._adopted:
            self._entries.pop(name, None)
            self._descriptions.pop(name, None)
        self._adopted.clear()

    def get(self, name: str) -> T:
        self._fill()
        if name not in self._entries:
            raise unknown_choice(self.kind, name, self._entries)
        return self._entries[name]

    def names(self) -> list[str]:
        self._fill()
        return sorted(self._entries)

    def describe(self) -> dict[str, str]:
        """name -> description of the registered entries (the package's own, not adopted plugins)."""
        return {n: self._descriptions[n] for n in self.names() if n not in self._adopted}

    def __contains__(self, name: str) -> bool:
        self._fill()
        return name in self._entries


# the registries, by the package that fills them and the names a registration may use there
_SOURCES = {
    "algorithm": ("algorithms", ("register", "ALGORITHMS")),
    "dataset": ("data", ("DATASETS",)),
    "partition": ("data", ("PARTITIONS",)),
    "model": ("models", ("MODELS",)),
}


def declared(kind: str) -> dict[str, str]:
    """name -> description of every `@register(name, description)` of a registry, read from the
    package's source without importing it (torch): `fedbench list` in a fraction of a second.
    A test holds it equal to the imported registry's `describe()`."""
    package, holders = _SOURCES[kind]
    return dict(sorted((name, doc) for holder, name, doc in _registrations(package) if holder in holders))


@functools.cache
def _registrations(package: str) -> list[tuple[str, str, str]]:
    """(registry holder, name, description) of every top-level registration in a package's modules."""
    found = []
    for path in sorted((Path(__file__).resolve().parent.parent / package).rglob("*.py")):
        text = path.read_text()
        if "register(" not in text:
            continue
        for node in ast.parse(text).body:
            for deco in getattr(node, "decorator_list", ()):
                if not isinstance(deco, ast.Call) or not deco.args or not isinstance(deco.args[0], ast.Constant):
                    continue
                func = deco.func
                holder = func.id if isinstance(func, ast.Name) else (
                    func.value.id if isinstance(func, ast.Attribute) and func.attr == "register"
                    and isinstance(func.value, ast.Name) else None)
                if holder is None:
                    continue
                given = deco.args[1].value if len(deco.args) > 1 and isinstance(deco.args[1], ast.Constant) else ""
                doc = (ast.get_docstring(node) or "").strip().splitlines()
                found.append((holder, deco.args[0].value, given or (doc[0] if doc else "")))
    return found
