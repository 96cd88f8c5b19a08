"""Counter-based random streams: every draw is a pure function of (seed, round, client, ...).

Because nothing is carried from one client to the next, serial, chunked, batched and
distributed executions of a round draw exactly the same minibatches.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

_MASK32 = 0xFFFFFFFF
# Odd multipliers below 2**31, so products of 32-bit values stay inside int64.
_M1, _M2 = 0x7FEB352D, 0x4F6CDD1D


def _mix32(x):  # ints or int64 tensors: the same bit operations
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * _M1) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _M2) & _MASK32
    return x ^ (x >> 16)


def hash_keys(*parts: int | Tensor, device: torch.device | str = "cpu") -> Tensor:
    """Broadcasted 32-bit hash of integer parts (ints or int64 tensors), as int64 in [0, 2**32)."""
    h = 0x9E3779B9  # a Python int until the first tensor part: leading scalars cost no tensor ops
    for p in parts:
        if not isinstance(h, Tensor) and isinstance(p, int):
            h = _mix32(h ^ _mix32(p + 0x632BE5AB))
            continue
        p = torch.as_tensor(p, dtype=torch.int64, device=device)
        h = _mix32(h ^ _mix32(p + 0x632BE5AB))
    return torch.as_tensor(h, dtype=torch.int64, device=device)


def uniform(*parts: int | Tensor, device: torch.device | str = "cpu") -> Tensor:
    """Uniform floats in [0, 1) (float64), one per broadcast position of the parts."""
    return hash_keys(*parts, device=device).double() / 2.0**32


# Stream tags, so that different uses of the same (seed, round, client) never share draws.
TAG_SHUFFLE, TAG_BLOCK, TAG_ALGO, TAG_AUGMENT = 1, 2, 3, 4


def sample_cohort(seed: int, round_: int, num_clients: int, clients_per_round: int) -> np.ndarray:
    """S distinct clients, uniform without replacement, independently each round (sorted ids)."""
    rng = np.random.default_rng([seed, round_, 0xC0])
    return np.sort(rng.choice(num_clients, clients_per_round, replace=False))
