"""Federated algorithms, one module per family, each a transcription of its paper."""

from fedbench.algorithms.base import Algorithm, ClientStateSpec, Cohort, Setting, State
from fedbench.algorithms.registry import ALGORITHMS, load_all, register

__all__ = ["ALGORITHMS", "Algorithm", "ClientStateSpec", "Cohort", "Setting", "State", "load_all", "register"]
