"""The algorithm registry. Modules in this package register themselves on import."""

from __future__ import annotations

import importlib
import pkgutil

from fedbench.registry import Registry

ALGORITHMS: Registry = Registry("algorithm")


def register(name: str, description: str = ""):
    def deco(cls):
        cls.name = name
        return ALGORITHMS.register(name, description)(cls)

    return deco


def load_all() -> Registry:
    """Import every module of fedbench.algorithms, so adding an algorithm is adding a file."""
    import fedbench.algorithms as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"fedbench.algorithms.{module.name}")
    return ALGORITHMS
