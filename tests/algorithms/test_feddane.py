"""FedDANE (Li et al. 2019), FedSSO's baseline (papers/fedsso.md §3.4): one local step is gradient
descent over two exchanges, and its fixed point is the optimum despite heterogeneity."""

from __future__ import annotations

import torch

from tests.problems import FULL_BATCH, LEAST_SQUARES, N, build, client_data, pooled_optimum
from fedbench.engine.loop import initial_state, run, run_round

# FedSSO's baseline setting on heterogeneous least squares: full participation, 5 full-batch steps
LSTSQ = [*LEAST_SQUARES, "dataset.dim=5", *FULL_BATCH, f"clients_per_round={N}", "eta_l=0.05"]


def test_feddane_one_local_step_is_gradient_descent_with_two_exchanges():
    """K = 1, full batch: the first local direction is grad f_i(x) + g_bar - grad f_i(x) = g_bar, so
    a FedDANE round is x <- x - eta_l grad f(x); it moves 2d floats each way per client."""
    fed = build(*LSTSQ, "local_steps=1", "algorithm=feddane", "rounds=1")
    state = initial_state(fed)
    x0 = state.server["x"].clone()
    down, up = run_round(fed, state)
    d = fed.flat.dim
    assert (down, up) == (N * 2 * d, N * 2 * d)
    grad = sum(2 * A.T @ (A @ x0 - y) / len(y) for A, y in (client_data(fed, i) for i in range(N))) / N
    assert torch.allclose(state.server["x"], x0 - 0.05 * grad, rtol=1e-12, atol=1e-14)


def test_feddane_reaches_the_optimum():
    """FedDANE's local problems are stationary at x* (g_bar = 0 there), so its fixed point is the
    optimum despite heterogeneity; it converges linearly here, to the float64 floor."""
    fed = build(*LSTSQ, "algorithm=feddane", "rounds=200")
    x = run(fed).server["x"]
    x_star = pooled_optimum(fed)
    assert float((x - x_star).norm()) <= 1e-12 * float(x_star.norm())
