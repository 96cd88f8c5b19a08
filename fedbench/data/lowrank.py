"""Synthetic low-rank matrix sensing (LoSAC, Chen et al., TKDD 2023, arXiv:2112.07839, §5.5).

X_G = diag(I_r, 0) in R^{d x d} (eq. 21); every entry of D_j ~ N(mean, 1); y_j = <X_G, D_j> + N(0, noise^2).
The metrics are the recovery error ||X - X_G||_F and the rank #{sigma_k(X) > rank_tol} of the
evaluated model (losac.md §4.6).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS
from fedbench.core.errors import check


def recovery_metrics(truth: Tensor, rank_tol: float):
    """x = vec(X) -> {rec_err: ||X - truth||_F, rank: #{sigma > rank_tol}} (singular values in float64)."""

    def metrics(x: Tensor) -> dict[str, float]:
        X = x.detach().to("cpu", torch.float64).reshape(truth.shape)
        if not bool(torch.isfinite(X).all()):  # a diverged run: its metrics say so (the SVD would raise)
            return {"rec_err": float("nan"), "rank": float("nan")}
        sigma = torch.linalg.svdvals(X)
        return {"rec_err": float(torch.linalg.matrix_norm(X - truth)), "rank": float((sigma > rank_tol).sum())}

    return metrics


@DATASETS.register("lowrank", "synthetic low-rank matrix sensing y = <X_G, D> + noise (LoSAC §5.5; model=matrix)")
def lowrank(
    root: str = "data",
    download: bool = False,
    dim: int = 64,
    rank: int = 8,
    num_users: int = 100,
    samples_per_user: int = 100,
    mean: float = 0.1,
    noise: float = 0.1,
    test_samples: int = 1000,
    rank_tol: float = 1e-3,
    seed: int = 0,
) -> Dataset:
    """Samples are i.i.d., so every partition is IID; partition=natural gives client k its
    `samples_per_user` samples (train_owner). Inputs are D_j of shape [dim, dim]."""
    check(1 <= rank <= dim, f"dataset.rank must lie in [1, dim={dim}], got {rank}")
    check(num_users >= 1 and samples_per_user >= 1, "dataset.num_users and samples_per_user must be >= 1")
    rng = np.random.default_rng(seed)
    truth = np.zeros((dim, dim))
    truth[:rank, :rank] = np.eye(rank)

    def sample(n: int) -> tuple[Tensor, Tensor]:
        D = rng.normal(mean, 1.0, (n, dim, dim)).astype(np.float32)
        y = D[:, :rank, :rank].trace(axis1=1, axis2=2) + noise * rng.normal(0.0, 1.0, n)
        return torch.from_numpy(D), torch.tensor(y, dtype=torch.float32)

    x, y = sample(num_users * samples_per_user)
    x_test, y_test = sample(test_samples)
    owner = torch.arange(num_users).repeat_interleave(samples_per_user)
    return Dataset(x, y, x_test, y_test, num_classes=1, task="regression", name="lowrank", train_owner=owner,
                   model_metrics=recovery_metrics(torch.from_numpy(truth), rank_tol))
