"""The algorithm registry. Modules in this package register themselves on import."""

from __future__ import annotations

from fedbench.core.registry import Registry

ALGORITHMS: Registry = Registry("algorithm", package="fedbench.algorithms")


def register(name: str, description: str = ""):
    def deco(cls):
        cls.name = name
        return ALGORITHMS.register(name, description)(cls)

    return deco


def load_all() -> Registry:
    """The registry with every module of fedbench.algorithms imported (adding an algorithm is
    adding a file; the registry fills itself on first use)."""
    ALGORITHMS.names()
    return ALGORITHMS
