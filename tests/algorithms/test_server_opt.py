"""Server optimisers against hand-written formulas and torch.optim; FedOpt's first step by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import build
from tests.problems import STOCHASTIC
from fedbench.engine.loop import initial_state, run_round
from fedbench.algorithms import server_opt

DELTAS = [[0.5, -1.0, 0.0], [0.2, 0.3, -0.4], [-0.6, 0.1, 0.25], [0.05, -0.05, 1.0]]


def _hand(kind: str, lr=0.1, b1=0.9, b2=0.99, tau=1e-3, v0=1e-6):
    """Reddi et al. Alg. 2 coordinate by coordinate, in plain floats."""
    x, m, v, path = [0.0] * 3, [0.0] * 3, [v0] * 3, []
    for delta in DELTAS:
        for j, dj in enumerate(delta):
            m[j] = b1 * m[j] + (1 - b1) * dj
            if kind == "adagrad":
                v[j] = v[j] + dj * dj
            elif kind == "adam":
                v[j] = b2 * v[j] + (1 - b2) * dj * dj
            else:  # yogi
                v[j] = v[j] - (1 - b2) * dj * dj * math.copysign(1.0, v[j] - dj * dj) * (v[j] != dj * dj)
            x[j] += lr * m[j] / (math.sqrt(v[j]) + tau)
        path.append(list(x))
    return path


OPTIMIZERS = {
    "adagrad": server_opt.adagrad(0.1, 0.9, 1e-3, 1e-6),
    "adam": server_opt.adam(0.1, 0.9, 0.99, 1e-3, 1e-6),
    "yogi": server_opt.yogi(0.1, 0.9, 0.99, 1e-3, 1e-6),
}


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_adaptive_servers_match_the_formulas(kind):
    opt = OPTIMIZERS[kind]
    x = torch.zeros(3, dtype=torch.float64)
    state = opt.init(x)
    for delta, expected in zip(DELTAS, _hand(kind)):
        step, state = opt.update(torch.tensor(delta, dtype=torch.float64), state)
        x = x + step
        assert torch.allclose(x, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-15)


def _torch_path(make, deltas):
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt, path = make([p]), []
    for delta in deltas:
        p.grad = -torch.tensor(delta, dtype=torch.float64)  # the pseudo-gradient is -Delta
        opt.step()
        path.append(p.detach().clone())
    return path


def _ours(opt, deltas):
    x, path = torch.zeros(3, dtype=torch.float64), []
    state = opt.init(x)
    for delta in deltas:
        step, state = opt.update(torch.tensor(delta, dtype=torch.float64), state)
        x = x + step
        path.append(x)
    return path


def test_fedavgm_is_torch_sgd_with_momentum_on_minus_delta():
    ours = _ours(server_opt.momentum(0.3, 0.9), DELTAS)
    ref = _torch_path(lambda p: torch.optim.SGD(p, lr=0.3, momentum=0.9), DELTAS)
    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-15)


def test_fedadagrad_without_momentum_is_torch_adagrad():
    ours = _ours(server_opt.adagrad(0.1, 0.0, 1e-3, 0.01), DELTAS)
    ref = _torch_path(lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-3, initial_accumulator_value=0.01), DELTAS)
    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-15)


def _fedopt_reference(server_step, rounds: int, eta_g: float):
    """FedOpt's trajectory written out: Delta_t is FedAvg's mean client delta at x_t (one eta_g = 1
    round of plain FedAvg from x_t, with round t's cohort and minibatches), then the server step of
    Reddi et al. Alg. 2 / Hsu et al. applied by `server_step(x, Delta, m, v)` -> (x, m, v)."""
    oracle = build(*STOCHASTIC, "algorithm=fedavg", "eta_g=1")
    state = initial_state(oracle)
    x, m, v, path = oracle.x0.clone(), None, None, []
    for t in range(rounds):
        state.round, state.server = t, {"x": x.clone()}
        run_round(oracle, state)
        delta = state.server["x"] - x
        m = torch.zeros_like(x) if m is None else m
        x, m, v = server_step(x, delta, m, v, eta_g)
        path.append(x)
    return path


def _adaptive(second_moment):
    def step(x, d, m, v, lr, b1=0.9, tau=1e-3):
        v = torch.full_like(x, tau**2) if v is None else v  # v_{-1} = tau^2
        m = b1 * m + (1 - b1) * d
        v = second_moment(v, d * d)
        return x + lr * m / (v.sqrt() + tau), m, v
    return step


ALG2 = {  # the paper's defaults: beta1 = 0.9, beta2 = 0.99, tau = 1e-3 (Reddi et al.); beta = 0.9 (Hsu et al.)
    "adam": _adaptive(lambda v, d2: 0.99 * v + 0.01 * d2),
    "yogi": _adaptive(lambda v, d2: v - 0.01 * d2 * torch.sign(v - d2)),
    "adagrad": _adaptive(lambda v, d2: v + d2),
    "avgm": lambda x, d, m, v, lr: (x + lr * (0.9 * m + d), 0.9 * m + d, v),
}


@pytest.mark.parametrize("variant", sorted(ALG2))
def test_fedavg_variant_follows_the_papers_server_step(variant):
    rounds, eta_g = 3, 0.05
    fed = build(*STOCHASTIC, f"rounds={rounds}", f"algorithm=fedavg/{variant}", f"eta_g={eta_g}")
    state = initial_state(fed)
    for t, expected in enumerate(_fedopt_reference(ALG2[variant], rounds, eta_g)):
        run_round(fed, state)
        state.round = t + 1
        assert torch.allclose(state.server["x"], expected, rtol=1e-10, atol=1e-13), t


def test_sgd_server_with_eta_g_one_is_plain_model_averaging():
    """server_opt=sgd (FedAvg's default) at eta_g = 1 is x + mean_i (x_i - x), bit for bit (momentum 0
    is FedAvg: tests/algorithms/test_baselines.py)."""
    fed = build(*STOCHASTIC, "rounds=1", "algorithm=fedavg", "eta_g=1")
    state = initial_state(fed)
    seen = {}
    aggregate = fed.algorithm.aggregate
    fed.algorithm.aggregate = lambda server, up, cohort: seen.update(up=up, w=cohort.weights) or aggregate(server, up, cohort)
    run_round(fed, state)
    expected = fed.x0 + torch.tensordot(seen["w"].to(fed.x0.dtype), seen["up"]["delta"], dims=1)
    assert torch.equal(state.server["x"], expected)
    assert set(state.server) == {"x"}  # sgd keeps no state
