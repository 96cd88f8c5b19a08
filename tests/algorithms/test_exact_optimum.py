"""Exact optima under heterogeneity (losac.md §8 target 3): on heterogeneous least squares the
drift-corrected methods reach the minimiser of the federation's objective (weighted by the client
sizes when the aggregation is), SCAFFOLD-Prox the composite one, while FedAvg and FedProx stall at a
biased point."""

from __future__ import annotations

import pytest

from tests.problems import LSTSQ, N, build, global_grad, local_grad, run_until
from fedbench.algorithms.prox import soft_threshold
from fedbench.engine.loop import initial_state, run_round


# the float64 floor (issue 40): each of these converges linearly on this strongly convex problem (SCAFFOLD:
# Karimireddy et al. 2020, Thm. III with sigma = 0), so it reaches the floor, not only 1e-8
FLOOR = 1e-12


def model(fed, state):
    return fed.algorithm.model(state.server)


EXACT = [  # (algorithm, S, round cap ~ twice what it needs)
    (["algorithm=scaffold"], 8, 400),
    (["algorithm=scaffold"], 3, 800),
    (["algorithm=scaffold", "algorithm.option=I"], 8, 400),
    (["algorithm=feddyn", "algorithm.alpha=5"], 8, 600),
    (["algorithm=feddyn", "algorithm.alpha=5"], 3, 600),
    (["algorithm=mime_svrg"], 8, 400),  # c is the cohort's gradient: exact only with S = N
]


@pytest.mark.parametrize("algorithm, S, max_rounds", EXACT, ids=str)
def test_drift_corrected_methods_reach_the_exact_optimum(algorithm, S, max_rounds):
    fed = build(*LSTSQ, *algorithm, f"clients_per_round={S}", f"rounds={max_rounds}")
    norm, _ = run_until(fed, lambda x: global_grad(fed, x).norm(), FLOOR, max_rounds)
    assert norm < FLOOR


@pytest.mark.parametrize("algorithm, S", [(["algorithm=scaffold"], 8), (["algorithm=scaffold"], 3),
                                          (["algorithm=feddyn", "algorithm.alpha=5"], 3)], ids=str)
def test_weighted_objective_optimum_with_unequal_clients(algorithm, S):
    """aggregation=num_samples optimises f = sum_i (n_i / n) f_i: SCAFFOLD's c and FedDyn's h must
    track sum_i p_i (state_i) with those p_i (1/N would leave a fixed point of the unweighted sum)."""
    fed = build(*LSTSQ, "dataset.size_growth=1.3", "aggregation=num_samples", *algorithm, f"clients_per_round={S}")
    sizes = fed.clients.size.double()
    assert sizes.max() / sizes.min() > 5  # clients of very different sizes (20 .. 125 samples)
    p = sizes / sizes.sum()

    def weighted_grad(x):
        return sum(p[i] * local_grad(fed, i, x) for i in range(N))

    norm, x = run_until(fed, lambda x: weighted_grad(x).norm(), FLOOR, 1200)
    assert norm < FLOOR
    assert global_grad(fed, x).norm() > 1e-3  # the unweighted objective's optimum is elsewhere


@pytest.mark.parametrize("algorithm", [["algorithm=fedavg"], ["algorithm=fedprox", "algorithm.mu=0.1"]], ids=str)
def test_fedavg_and_fedprox_stall_at_a_biased_point(algorithm):
    fed = build(*LSTSQ, *algorithm, f"clients_per_round={N}", "rounds=80")
    state = initial_state(fed)
    norms = []
    for r in range(80):
        run_round(fed, state)
        state.round += 1
        if r + 1 in (60, 80):
            norms.append(float(global_grad(fed, model(fed, state)).norm()))
    assert min(norms) > 0.1  # client drift: a fixed point with a visible gradient
    assert abs(norms[1] - norms[0]) < 1e-3 * norms[1]  # and it has stopped moving


def test_scaffold_prox_reaches_the_exact_composite_optimum():
    """With the l1 prox in every local step the fixed point is that of min f + lam ||x||_1:
    x = prox_{t lam}(x - t grad f(x)) for any t > 0."""
    lam, t = 0.1, 0.1
    fed = build(*LSTSQ, "algorithm=scaffold/prox", f"algorithm.lam={lam}", f"clients_per_round={N}", "rounds=400")

    def residual(x):
        return ((x - soft_threshold(x - t * global_grad(fed, x), t * lam)) / t).norm()

    value, x = run_until(fed, residual, FLOOR, 400)
    assert value < FLOOR
    assert (x.abs() < 1e-8).any()  # the prox is active: some coordinates of the solution vanish
