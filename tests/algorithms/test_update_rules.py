"""The baselines' update rules against their papers: each client's local path replayed by hand with
closed-form gradients, and the server state invariants whose violation is the classic bug (SCAFFOLD's
c and FedDyn's h as means over ALL clients, FedCM's momentum per unit step)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import advance
from tests.problems import LSTSQ, N, STOCHASTIC, build, local_grad
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run_round


def _table(state, name, fed):
    return state.tables[name].gather(list(range(N)), fed.device)  # never-seen clients read as 0


def _assert_server_mean(state, fed, server_key, table_key):
    assert torch.allclose(state.server[server_key], _table(state, table_key, fed).mean(0), rtol=0, atol=1e-13)


def test_scaffold_server_c_is_the_mean_of_all_client_variates():
    fed = build(*STOCHASTIC, "algorithm=scaffold", "rounds=6")
    advance(fed, initial_state(fed), 6, each=lambda state: _assert_server_mean(state, fed, "c", "c"))


def test_feddyn_server_h_averages_over_all_clients():
    """h = (1/N) sum over ALL N clients of g_k = grad L_k(theta_k), absent clients included;
    averaging over the cohort (1/S) breaks it."""
    fed = build(*STOCHASTIC, "algorithm=feddyn", "algorithm.alpha=0.5", "rounds=6")
    advance(fed, initial_state(fed), 6, each=lambda state: _assert_server_mean(state, fed, "h", "g"))


def test_scaffold_option_II_variate_is_the_mean_gradient_along_each_clients_own_path():
    """c_i+ = c_i - c + (x - y_i)/(K_i eta_l) equals (1/K_i) sum_k grad f_i(y_i^k) with full batches:
    it needs each client's own K_i and the learning rate actually used (here != eta_l)."""
    fed = build(*LSTSQ, "algorithm=scaffold", "clients_per_round=3")
    gen = torch.Generator().manual_seed(0)
    d = fed.x0.numel()
    ids, K, lr = [1, 4, 6], [1, 2, 4], 0.013  # unequal local work, a decayed learning rate
    work = LocalWork(fed.clients, torch.tensor(ids), 3, lr, 0, torch.tensor(K), None)
    x = fed.x0 + 0.1 * torch.randn(d, generator=gen, dtype=fed.x0.dtype)
    c = 0.1 * torch.randn(d, generator=gen, dtype=x.dtype)
    c_i = 0.1 * torch.randn(3, d, generator=gen, dtype=x.dtype)
    up, new = fed.algorithm.client_update({"x": x, "c": c}, {"c": c_i}, work)
    for s, (i, k) in enumerate(zip(ids, K)):
        y, grads = x.clone(), []
        for _ in range(k):
            grads.append(local_grad(fed, i, y))
            y = y - lr * (grads[-1] - c_i[s] + c)
        assert torch.allclose(up["dy"][s], y - x, rtol=0, atol=1e-13)
        assert torch.allclose(new["c"][s], torch.stack(grads).mean(0), rtol=0, atol=1e-11)
        assert torch.allclose(up["dc"][s], new["c"][s] - c_i[s], rtol=0, atol=1e-15)


LOCAL_STEP = {  # overrides, down/client state to draw, and the direction of one step at y
    "fedprox": (["algorithm.mu=0.3"], [], [], lambda y, g, gx, x, s, dn, cl: g + 0.3 * (y - x)),
    "scaffold": ([], ["c"], ["c"], lambda y, g, gx, x, s, dn, cl: g - cl["c"][s] + dn["c"]),
    "feddyn": (["algorithm.alpha=0.4"], [], ["g"], lambda y, g, gx, x, s, dn, cl: g - cl["g"][s] + 0.4 * (y - x)),
    "fedcm": (["algorithm.alpha=0.2"], ["momentum"], [], lambda y, g, gx, x, s, dn, cl: 0.2 * g + 0.8 * dn["momentum"]),
    "mime_svrg": ([], ["c"], [], lambda y, g, gx, x, s, dn, cl: g - gx + dn["c"]),
}


@pytest.mark.parametrize("name", sorted(LOCAL_STEP))
def test_local_steps_follow_the_papers_direction(name):
    """Each client's local path, replayed by hand with closed-form full-batch gradients."""
    overrides, down_keys, client_keys, direction = LOCAL_STEP[name]
    fed = build(*LSTSQ, "clients_per_round=3", f"algorithm={name}", *overrides)
    gen = torch.Generator().manual_seed(1)
    d = fed.x0.numel()

    def draw(*shape):
        return 0.1 * torch.randn(*shape, d, generator=gen, dtype=fed.x0.dtype)

    ids, K, lr = [0, 2, 7], [1, 3, 2], 0.07  # unequal local work, lr != eta_l
    work = LocalWork(fed.clients, torch.tensor(ids), 0, lr, 0, torch.tensor(K), None)
    x = fed.x0 + draw()
    down = {"x": x, **{k: draw() for k in down_keys}}
    client = {k: draw(3) for k in client_keys}
    up, new_client = fed.algorithm.client_update(down, client, work)
    delta = up.get("delta", up.get("dy"))
    for s, (i, k) in enumerate(zip(ids, K)):
        y = x.clone()
        for _ in range(k):
            y = y - lr * direction(y, local_grad(fed, i, y), local_grad(fed, i, x), x, s, down, client)
        assert torch.allclose(delta[s], y - x, rtol=0, atol=1e-13)
        if name == "feddyn":  # grad L_k(theta_k^t) = grad L_k(theta_k^{t-1}) - alpha (theta_k^t - theta^{t-1})
            assert torch.allclose(new_client["g"][s], client["g"][s] - 0.4 * (y - x), rtol=0, atol=1e-13)


def test_fedcm_momentum_is_the_mean_pseudo_gradient_per_unit_step():
    fed = build(*STOCHASTIC, "algorithm=fedcm", "rounds=1", "eta_l_decay=0.5", "eta_g=1")
    state = initial_state(fed)
    x0 = state.server["x"].clone()
    run_round(fed, state)
    K, lr = 3, fed.eta_l  # round 0: eta_l * 0.5**0
    assert torch.allclose(state.server["momentum"], (x0 - state.server["x"]) / (K * lr), rtol=0, atol=1e-13)
