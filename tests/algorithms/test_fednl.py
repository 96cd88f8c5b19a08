"""FedNL (Safaryan et al. 2022), FedSSO's Newton baseline (papers/fedsso.md §3.5): its Hessians are
exact, so one round from H^0 is a Newton step that solves a quadratic; it needs full participation."""

from __future__ import annotations

import pytest
import torch

from tests.problems import FULL_BATCH, LEAST_SQUARES, N, build, client_data, pooled_optimum
from fedbench.algorithms.fednl import local_hessians
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import run
from fedbench.core.errors import ConfigError

# FedSSO's baseline setting on heterogeneous least squares: full participation, 5 full-batch steps
LSTSQ = [*LEAST_SQUARES, "dataset.dim=5", *FULL_BATCH, f"clients_per_round={N}", "eta_l=0.05"]


def test_fednl_hessians_are_exact_and_one_round_solves_a_quadratic():
    fed = build(*LSTSQ, "algorithm=fednl", "rounds=1")
    ids = torch.arange(3)
    work = LocalWork(fed.clients, ids, 0, 0.05, 0, None, 1)
    X = torch.randn(3, fed.flat.dim, dtype=torch.float64)
    H = local_hessians(work, X)
    for i in range(3):
        A, y = client_data(fed, i)
        assert torch.allclose(H[i], 2 * A.T @ A / len(y), rtol=1e-10, atol=1e-10)
    x1 = run(fed).server["x"]  # H^0 is the exact Hessian: one Newton step
    x_star = pooled_optimum(fed)
    assert float((x1 - x_star).norm()) <= 1e-12 * float(x_star.norm())  # the float64 floor (FedNL: local linear rate)


def test_fednl_needs_full_participation():
    with pytest.raises(ConfigError, match="full participation"):
        build(*LSTSQ, "clients_per_round=4", "algorithm=fednl")
