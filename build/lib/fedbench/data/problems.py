"""Synthetic optimisation problems with known optima, for the algorithms' exact-convergence tests."""

from __future__ import annotations

import numpy as np
import torch

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
    rng = np.random.default_rng(seed)
    w_common = rng.normal(0, 1, dim)
    xs, ys, owner = [], [], []
    for k in range(num_users):
        n_k = max(1, round(samples_per_user * size_growth**k))
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
