"""Server optimisers against hand-written formulas and torch.optim; FedOpt's first step by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tests.problems import STOCHASTIC, train
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


FIRST_STEP = {  # the server step of round 1 from Delta, with m = 0, v = tau^2 before it
    "fedadam": lambda d, tau: 0.1 * d / ((0.99 * tau**2 + 0.01 * d * d).sqrt() + tau),
    "fedyogi": lambda d, tau: 0.1 * d / ((tau**2 - 0.01 * d * d * torch.sign(tau**2 - d * d)).sqrt() + tau),
    "fedadagrad": lambda d, tau: 0.1 * d / ((tau**2 + d * d).sqrt() + tau),
    "fedavgm": lambda d, tau: d,
}


@pytest.mark.parametrize("algorithm", sorted(FIRST_STEP))
def test_first_round_is_the_hand_computed_step_on_fedavg_delta(algorithm):
    common = [*STOCHASTIC, "rounds=1"]
    fed, ref = train(*common, "algorithm=fedavg", "eta_g=1")  # x0 + Delta
    delta = ref.server["x"] - fed.x0
    eta_g, tau = 0.05, 1e-3
    _, got = train(*common, f"algorithm={algorithm}", f"eta_g={eta_g}")
    expected = fed.x0 + eta_g * FIRST_STEP[algorithm](delta, tau)
    assert torch.allclose(got.server["x"], expected, rtol=1e-12, atol=1e-14)
