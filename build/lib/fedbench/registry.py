"""Name -> factory registries for algorithms, data sets, partitions and models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from fedbench.errors import unknown_choice

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of factories; each entry carries a one-line description for `fedbench list`."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._descriptions: dict[str, str] = {}

    def register(self, name: str, description: str = "") -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._entries[name] = obj
            doc = description or (getattr(obj, "__doc__", None) or "").strip().splitlines()[0:1]
            self._descriptions[name] = doc if isinstance(doc, str) else (doc[0] if doc else "")
            return obj

        return deco

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise unknown_choice(self.kind, name, self._entries)
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def describe(self) -> dict[str, str]:
        return {n: self._descriptions[n] for n in self.names()}

    def __contains__(self, name: str) -> bool:
        return name in self._entries
