"""The small problems of the test suite, defined once: the heterogeneous least-squares federation
(losac.md §8 target 3; clients with their own feature shifts and optima, a linear model, float64)
in the settings the tests use, and its gradients, curvatures and optimum computed in closed form
from the clients' data, not by the engine."""

from __future__ import annotations

import torch
from torch import Tensor

from tests.conftest import build
from fedbench.engine.loop import Federation, RunState, initial_state, run, run_round

N = 8
# the federation: N clients of the lstsq data set (dataset.* sets its size and heterogeneity), float64
LEAST_SQUARES = ["dataset=lstsq", "partition=natural", "model=linear", f"num_clients={N}", "engine.dtype=float64",
                 "eval_every=0"]
# deterministic local work: full local batches, a fixed number of local steps
FULL_BATCH = ["batch_size=0", "local_epochs=null", "local_steps=5"]
# d = 5 + bias, 5 local steps on full local batches with a constant step (eta_l * L_max ~ 0.9)
LSTSQ = [*LEAST_SQUARES, "dataset.dim=5", "dataset.heterogeneity=0.5", *FULL_BATCH, "eta_l=0.1"]
# minibatches and partial participation: the random streams matter
STOCHASTIC = [*LSTSQ, "clients_per_round=3", "batch_size=5", "local_steps=3", "rounds=2"]


def train(*overrides: str) -> tuple[Federation, RunState]:
    fed = build(*overrides)
    return fed, run(fed)


def run_until(fed: Federation, residual, tol: float, max_rounds: int) -> tuple[float, Tensor]:
    """Train until residual(model) < tol (checked every 10 rounds) or max_rounds; (residual, model)."""
    state = initial_state(fed)
    value, x = float("inf"), fed.x0
    while state.round < max_rounds:
        run_round(fed, state)
        state.round += 1
        if state.round % 10 == 0:
            x = fed.algorithm.model(state.server)
            value = float(residual(x))
            if value < tol:
                break
    return value, x


def client_data(fed: Federation, i: int) -> tuple[Tensor, Tensor]:
    """Client i's design matrix [a, 1] (the linear model's flat layout: weights, then bias) and y."""
    idx = fed.clients.index[i, : int(fed.clients.size[i])]
    a = fed.clients.x[idx]
    return torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype)], 1), fed.clients.y[idx]


def local_grad(fed: Federation, i: int, x: Tensor) -> Tensor:
    """grad f_i(x) for f_i = mean_j (<a_j, w> + b - y_j)^2."""
    A, y = client_data(fed, i)
    return 2.0 * A.T @ (A @ x - y) / len(y)


def global_grad(fed: Federation, x: Tensor) -> Tensor:
    """grad f(x), f = (1/N) sum_i f_i."""
    return torch.stack([local_grad(fed, i, x) for i in range(fed.clients.num_clients)]).mean(0)


def pooled_optimum(fed: Federation) -> Tensor:
    """The minimiser of the squared loss over every client's samples pooled (= the minimiser of
    f = (1/N) sum_i f_i when the clients hold equally many samples)."""
    blocks = [client_data(fed, i) for i in range(fed.clients.num_clients)]
    A, y = torch.cat([A for A, _ in blocks]), torch.cat([y for _, y in blocks])
    return torch.linalg.lstsq(A, y[:, None]).solution[:, 0]


def max_curvature(fed: Federation) -> float:
    """L_max: the largest eigenvalue of a client's Hessian 2 A_i^T A_i / n_i."""
    return max(float(torch.linalg.eigvalsh(2 * A.T @ A / len(A))[-1])
               for A, _ in (client_data(fed, i) for i in range(fed.clients.num_clients)))
