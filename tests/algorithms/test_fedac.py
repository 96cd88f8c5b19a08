"""FedAc (Yuan & Ma 2020), FedSSO's baseline for convex problems (papers/fedsso.md §3.7): the
coefficients of Thm. 3.1 / 3.3, and accelerated full-gradient descent to the optimum."""

from __future__ import annotations

import torch

from tests.problems import FULL_BATCH, LEAST_SQUARES, N, build, pooled_optimum
from fedbench.algorithms.fedac import FedAc
from fedbench.engine.loop import run

# FedSSO's baseline setting on heterogeneous least squares: full participation, 5 full-batch steps
LSTSQ = [*LEAST_SQUARES, "dataset.dim=5", *FULL_BATCH, f"clients_per_round={N}", "eta_l=0.05"]


def test_fedac_with_one_local_step_reaches_the_optimum():
    """With one local step FedAc is accelerated full-gradient descent."""
    fed = build(*LSTSQ, "algorithm=fedac", "algorithm.mu=0.5", "local_steps=1", "rounds=100")
    x_star = pooled_optimum(fed)
    state = run(fed)
    assert float((fed.algorithm.model(state.server) - x_star).norm()) < 1e-7 * float(x_star.norm())


def test_fedac_coefficients():
    eta, K, mu = 0.01, torch.tensor([5, 5000]), 0.1
    a1, b1, g1 = FedAc(mu=mu, variant="I").coefficients(eta, K)
    expected_gamma = torch.tensor([[(eta / (mu * 5)) ** 0.5], [eta]], dtype=torch.float64)  # max(eta, sqrt(eta/(mu K)))
    assert torch.allclose(g1, expected_gamma)
    assert torch.allclose(a1, 1 / (expected_gamma * mu)) and torch.allclose(b1, a1 + 1)
    a2, b2, _ = FedAc(mu=mu, variant="II").coefficients(eta, K)
    assert torch.allclose(a2, 1.5 / (expected_gamma * mu) - 0.5) and torch.allclose(b2, 2 * a2**2 / (a2 - 1))
