"""FedSSO's comparison methods: FedDANE, FedAc, FedNL (papers/fedsso.md §3.4-3.7), on heterogeneous
least squares where the answers are known in closed form."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_cfg
from fedbench.algorithms.fednl import local_hessians
from fedbench.runs.build import build_federation
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run, run_round
from fedbench.core.errors import ConfigError

LSTSQ = ["dataset=lstsq", "dataset.dim=5", "partition=natural", "num_clients=8", "clients_per_round=8",
         "model=linear", "engine.dtype=float64", "batch_size=0", "local_epochs=null", "local_steps=5",
         "eval_every=0", "eta_l=0.05"]


def _blocks(fed):
    A = torch.cat([fed.dataset.x_train, torch.ones(len(fed.dataset.x_train), 1, dtype=torch.float64)], 1)
    y = fed.dataset.y_train
    index, size = fed.clients.index, fed.clients.size
    return [(A[index[i, : size[i]]], y[index[i, : size[i]]]) for i in range(fed.clients.num_clients)]


def _x_star(fed):
    A, y = torch.cat([b[0] for b in _blocks(fed)]), torch.cat([b[1] for b in _blocks(fed)])
    return torch.linalg.lstsq(A, y[:, None]).solution[:, 0]


def test_fednl_hessians_are_exact_and_one_round_solves_a_quadratic():
    fed, _ = build_federation(make_cfg(*LSTSQ, "algorithm=fednl", "rounds=1"))
    ids = torch.arange(3)
    work = LocalWork(fed.clients, ids, 0, 0.05, 0, None, 1)
    X = torch.randn(3, fed.flat.dim, dtype=torch.float64)
    H = local_hessians(work, X)
    for i, (A, y) in enumerate(_blocks(fed)[:3]):
        assert torch.allclose(H[i], 2 * A.T @ A / len(y), rtol=1e-10, atol=1e-10)
    x1 = run(fed).server["x"]  # H^0 is the exact Hessian: one Newton step
    x_star = _x_star(fed)
    assert float((x1 - x_star).norm()) < 1e-9 * float(x_star.norm())


def test_fednl_needs_full_participation():
    with pytest.raises(ConfigError, match="full participation"):
        build_federation(make_cfg(*LSTSQ, "clients_per_round=4", "algorithm=fednl"))


def test_feddane_one_local_step_is_gradient_descent_with_two_exchanges():
    """K = 1, full batch: the first local direction is grad f_i(x) + g_bar - grad f_i(x) = g_bar, so
    a FedDANE round is x <- x - eta_l grad f(x); it moves 2d floats each way per client."""
    fed, _ = build_federation(make_cfg(*LSTSQ, "local_steps=1", "algorithm=feddane", "rounds=1"))
    state = initial_state(fed)
    x0 = state.server["x"].clone()
    down, up = run_round(fed, state)
    d = fed.flat.dim
    assert (down, up) == (8 * 2 * d, 8 * 2 * d)
    grad = sum(2 * A.T @ (A @ x0 - y) / len(y) for A, y in _blocks(fed)) / 8
    assert torch.allclose(state.server["x"], x0 - 0.05 * grad, rtol=1e-12, atol=1e-14)


def test_feddane_and_fedac_reach_the_optimum():
    """FedDANE's local problems are stationary at x* (g_bar = 0 there), so its fixed point is the
    optimum despite heterogeneity; FedAc with one local step is accelerated full-gradient descent."""
    fed, _ = build_federation(make_cfg(*LSTSQ, "algorithm=feddane", "rounds=100"))
    x = run(fed).server["x"]
    x_star = _x_star(fed)
    assert float((x - x_star).norm()) < 1e-8 * float(x_star.norm())
    fed, _ = build_federation(make_cfg(*LSTSQ, "algorithm=fedac", "algorithm.mu=0.5", "local_steps=1", "rounds=100"))
    state = run(fed)
    assert float((fed.algorithm.model(state.server) - x_star).norm()) < 1e-7 * float(x_star.norm())


def test_fedac_coefficients():
    from fedbench.algorithms.fedac import FedAc

    eta, K, mu = 0.01, torch.tensor([5, 5000]), 0.1
    a1, b1, g1 = FedAc(mu=mu, variant="I").coefficients(eta, K)
    expected_gamma = torch.tensor([[(eta / (mu * 5)) ** 0.5], [eta]], dtype=torch.float64)  # max(eta, sqrt(eta/(mu K)))
    assert torch.allclose(g1, expected_gamma)
    assert torch.allclose(a1, 1 / (expected_gamma * mu)) and torch.allclose(b1, a1 + 1)
    a2, b2, _ = FedAc(mu=mu, variant="II").coefficients(eta, K)
    assert torch.allclose(a2, 1.5 / (expected_gamma * mu) - 0.5) and torch.allclose(b2, 2 * a2**2 / (a2 - 1))
