"""Federated algorithms, one module per family, each a transcription of its paper. They import
only fedbench.core and each other's helpers; the engine runs them (DESIGN.md, docs/engine.md)."""

from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.registry import ALGORITHMS, load_all, register

__all__ = ["ALGORITHMS", "Algorithm", "load_all", "register"]
