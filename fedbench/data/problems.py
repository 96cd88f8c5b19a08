"""Synthetic optimisation problems with known optima, for the algorithms' exact-convergence tests."""

from __future__ import annotations

import math

import numpy as np
import torch

from fedbench.core.errors import ConfigError, size_text
from fedbench.core.memory import available_memory
from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS


@DATASETS.register("lstsq", "heterogeneous least squares: per-client feature shifts and solutions (natural split)")
def lstsq(
    root: str = "data",
    download: bool = False,
    num_users: int = 8,
    samples_per_user: int = 20,
    dim: int = 10,
    heterogeneity: float = 1.0,
    noise: float = 0.1,
    seed: int = 0,
    size_growth: float = 1.0,
) -> Dataset:
    """Client k: a ~ N(m_k, I) with m_k ~ N(0, h^2 I), y = <a, w_k> + 1 + noise, w_k ~ N(w, h^2 I).
    Client k holds round(samples_per_user * size_growth**k) samples (1: equal sizes; > 1: unequal,
    for aggregation=num_samples).

    Each client's optimum w_k differs (h = heterogeneity), so FedAvg's fixed point is biased
    while the global least-squares optimum is unique. Use with model=linear (or mclr),
    partition=natural, num_clients=num_users; the test set is the training set.
    """
    sizes = client_sizes(num_users, samples_per_user, dim, size_growth)
    rng = np.random.default_rng(seed)
    w_common = rng.normal(0, 1, dim)
    xs, ys, owner = [], [], []
    for k, n_k in enumerate(sizes):
        shift = rng.normal(0, heterogeneity, dim)
        a = rng.normal(0, 1, (n_k, dim)) + shift
        w_k = w_common + rng.normal(0, heterogeneity, dim)
        xs.append(a)
        ys.append(a @ w_k + 1.0 + noise * rng.normal(0, 1, n_k))
        owner.append(np.full(n_k, k))
    x = torch.tensor(np.concatenate(xs), dtype=torch.float32)
    y = torch.tensor(np.concatenate(ys), dtype=torch.float32)
    return Dataset(x, y, x, y, num_classes=1, task="regression", name="lstsq",
                   train_owner=torch.tensor(np.concatenate(owner)))


def client_sizes(num_users: int, samples_per_user: int, dim: int, size_growth: float) -> list[int]:
    """round(samples_per_user * size_growth**k) samples for client k (at least one), refused before any is drawn
    when their features would not fit in memory: size_growth=100 over 8 users asked for 2e15 samples."""
    try:
        sizes = [max(1.0, samples_per_user * size_growth**k) for k in range(num_users)]
    except OverflowError:
        sizes = [math.inf]
    rows = sum(sizes)
    need = rows * (dim + 1) * 12  # a float64 draw of each sample's features and label, and its float32 tensor
    if need > available_memory():
        held = f"{rows:,.3g} samples, ~{size_text(need)}" if math.isfinite(need) else "more samples than a float counts"
        raise ConfigError(f"dataset.size_growth={size_growth}: the {num_users} users hold {held} (samples_per_user="
                          f"{samples_per_user} x size_growth**k for user k), more than this machine has available; use a "
                          "size_growth nearer 1, or fewer users")
    return [round(n) for n in sizes]
