"""Populations whose clients are made on demand: client k's training data is a function of k
(a seeded generator, or rows of a file on disk), made when the client is sampled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class Population:
    """N clients, none held in memory: `make(k)` returns client k's training (x, y) as arrays.

    Attributes:
      sizes: [N] training samples per client (known up front: weights and step counts need them).
      fingerprint: the population's identity (partition_fingerprint of a run), cheap to compute.
      made: clients made so far (tests check that a round makes its cohort's data only).
    """

    sizes: np.ndarray
    make: Callable[[int], tuple[np.ndarray, np.ndarray]]
    fingerprint: str
    made: int = 0

    @property
    def num_clients(self) -> int:
        return len(self.sizes)

    def train(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.made += 1
        return self.make(k)
