"""Synthetic sparse logistic regression of Zhang, Hu, Johansson (arXiv:2502.03958, §4.1; Figs. 2-3):
the FedProx Synthetic(alpha, beta) generator (Li et al. 2020) with binary labels (papers/composite.md §4.1).

Also registers the OmegaConf resolver `logistic_inv_lmax`, the step-size rule eta = 1/L_max of §4.1:
`eta_l: ${logistic_inv_lmax:${dataset}}` (optionally times a factor: `${logistic_inv_lmax:${dataset},0.5}`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS
from fedbench.core.errors import ConfigError


@DATASETS.register("sparse_logreg", "binary Synthetic(alpha, beta) of FedProx, m samples per client (composite §4.1)")
def sparse_logreg(
    root: str = "data",
    download: bool = False,
    num_users: int = 10,
    samples_per_user: int = 200,
    dim: int = 60,
    alpha: float = 1.0,
    beta: float = 1.0,
    seed: int = 0,
) -> Dataset:
    """Client i: u_i ~ N(0, alpha^2), B_i ~ N(0, beta^2), v_i ~ N(B_i, I), w_i ~ N(u_i, I), c_i ~ N(u_i, 1);
    a_ij ~ N(v_i, diag(j^-1.2)), b_ij = sign(w_i^T a_ij + c_i) with sign(0) = +1, stored as y = (b + 1) / 2
    (task `binary`: the logistic loss log(1 + exp(-b a^T x))). alpha sets how much the clients' models
    differ, beta how much their features do. Use model=linear model.bias=false, partition=natural,
    num_clients=num_users; the test set is the training set (the metrics of §4.1 are on the objective)."""
    for key, value in (("num_users", num_users), ("samples_per_user", samples_per_user), ("dim", dim)):
        if value < 1:
            raise ConfigError(f"dataset.{key} must be >= 1, got {value}")
    if alpha < 0 or beta < 0:
        raise ConfigError(f"dataset.alpha and dataset.beta must be >= 0, got {alpha}, {beta}")
    rng = np.random.default_rng(seed)
    feature_std = np.arange(1, dim + 1, dtype=float) ** -0.6  # Sigma = diag(j^-1.2)
    xs, ys = [], []
    for _ in range(num_users):
        u, b = rng.normal(0, alpha), rng.normal(0, beta)
        v = rng.normal(b, 1, dim)
        w, c = rng.normal(u, 1, dim), rng.normal(u, 1)
        a = v + feature_std * rng.normal(0, 1, (samples_per_user, dim))
        xs.append(a)
        ys.append((a @ w + c >= 0).astype(float))
    x = torch.tensor(np.concatenate(xs))
    y = torch.tensor(np.concatenate(ys))
    owner = torch.arange(num_users).repeat_interleave(samples_per_user)
    return Dataset(x, y, x, y, num_classes=1, task="binary", name="sparse_logreg", train_owner=owner)


def logistic_smoothness(dataset: Dataset) -> float:
    """L_max = max_i lambda_max(A_i^T A_i) / (4 m_i): the largest smoothness constant of the clients'
    mean logistic losses f_i (no intercept)."""
    if dataset.train_owner is None:
        raise ConfigError(f"data set {dataset.name!r} has no natural clients to take L_max over")
    x = dataset.x_train.double()
    return max(
        float(torch.linalg.eigvalsh(a.T @ a / (4 * len(a)))[-1])
        for a in (x[dataset.train_owner == i] for i in dataset.train_owner.unique())
    )


@lru_cache(maxsize=64)
def _inv_lmax(name: str, params: tuple) -> float:
    return 1.0 / logistic_smoothness(DATASETS.get(name)(**dict(params)))


def inv_lmax(dataset: DictConfig, factor: float = 1.0) -> float:
    """factor / L_max of the data set configured by `dataset` (a config node with its name)."""
    params = OmegaConf.to_container(dataset, resolve=True)
    name = params.pop("name")
    params = {k: v for k, v in params.items() if k not in ("root", "download")}
    return factor * _inv_lmax(name, tuple(sorted(params.items())))


OmegaConf.register_new_resolver("logistic_inv_lmax", inv_lmax, replace=True)
