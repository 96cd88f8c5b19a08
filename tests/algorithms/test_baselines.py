"""The baselines against their math: reductions, exact optima under heterogeneity, the state
invariants that the classic bugs break, and floats sent per round."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import advance
from tests.problems import LSTSQ, N, STOCHASTIC, build, global_grad, local_grad, run_until, train
from fedbench.algorithms.prox import soft_threshold
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run_round
from fedbench.core.errors import ConfigError


def model(fed, state):
    return fed.algorithm.model(state.server)


# -- reductions at special parameter values -------------------------------------------------------

@pytest.mark.parametrize(
    "algorithm, rounds",
    [
        (["algorithm=fedprox", "algorithm.mu=0"], 3),
        (["algorithm=fedavg/avgm", "algorithm.server_opt.momentum=0"], 3),
        (["algorithm=fedcm", "algorithm.alpha=1"], 3),
        (["algorithm=scaffold"], 1),  # c = c_i = 0 in the first round
        (["algorithm=scaffold", "algorithm.option=I"], 1),
    ],
    ids=["fedprox_mu0", "fedavgm_momentum0", "fedcm_alpha1", "scaffold_round1", "scaffold_I_round1"],
)
def test_reduces_to_fedavg(algorithm, rounds):
    common = [*STOCHASTIC, f"rounds={rounds}", "eta_g=0.7"]
    _, ref = train(*common, "algorithm=fedavg")
    _, got = train(*common, *algorithm)
    assert torch.equal(got.server["x"], ref.server["x"])


def test_scaffold_differs_from_fedavg_once_control_variates_are_set():
    common = [*STOCHASTIC, "rounds=2"]
    _, ref = train(*common, "algorithm=fedavg")
    _, got = train(*common, "algorithm=scaffold")
    assert not torch.allclose(got.server["x"], ref.server["x"])


def test_dsgd_is_fedavg_with_one_local_step_and_fedsgd_with_full_batches():
    one_step = [*STOCHASTIC, "local_steps=1", "rounds=3", "eta_l_decay=0.9"]
    _, ref = train(*one_step, "algorithm=fedavg")
    _, got = train(*one_step, "algorithm=dsgd")
    assert torch.allclose(got.server["x"], ref.server["x"], rtol=0, atol=1e-13)
    full = [*LSTSQ, "clients_per_round=3", "rounds=3", "eta_g=0.5", "eta_l_decay=0.9"]  # FedSGD follows the decay too
    _, ref = train(*full, "algorithm=fedsgd")
    _, got = train(*full, "algorithm=dsgd")
    assert torch.allclose(got.server["x"], ref.server["x"], rtol=0, atol=1e-13)


def test_mime_with_one_client_and_full_batches_is_gradient_descent():
    # c = grad f_1(x) and g(x; zeta) = grad f_1(x): the SVRG correction cancels exactly
    one = [*LSTSQ, "num_clients=1", "clients_per_round=1", "dataset.num_users=1", "rounds=3"]
    _, ref = train(*one, "algorithm=fedavg")
    _, got = train(*one, "algorithm=mime_svrg")
    assert torch.allclose(got.server["x"], ref.server["x"], rtol=0, atol=1e-12)


# -- exact optimum under heterogeneity (losac.md §8 target 3) -------------------------------------

EXACT = [  # (algorithm, S, round cap ~ twice what it needs)
    (["algorithm=scaffold"], 8, 200),
    (["algorithm=scaffold"], 3, 400),
    (["algorithm=scaffold", "algorithm.option=I"], 8, 200),
    (["algorithm=feddyn", "algorithm.alpha=5"], 8, 300),
    (["algorithm=feddyn", "algorithm.alpha=5"], 3, 300),
    (["algorithm=mime_svrg"], 8, 200),  # c is the cohort's gradient: exact only with S = N
]


@pytest.mark.parametrize("algorithm, S, max_rounds", EXACT, ids=str)
def test_drift_corrected_methods_reach_the_exact_optimum(algorithm, S, max_rounds):
    fed = build(*LSTSQ, *algorithm, f"clients_per_round={S}", f"rounds={max_rounds}")
    norm, _ = run_until(fed, lambda x: global_grad(fed, x).norm(), 1e-8, max_rounds)
    assert norm < 1e-8


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

    norm, x = run_until(fed, lambda x: weighted_grad(x).norm(), 1e-8, 600)
    assert norm < 1e-8
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
    fed = build(*LSTSQ, "algorithm=scaffold_prox", f"algorithm.lam={lam}", f"clients_per_round={N}", "rounds=200")

    def residual(x):
        return ((x - soft_threshold(x - t * global_grad(fed, x), t * lam)) / t).norm()

    value, x = run_until(fed, residual, 1e-8, 200)
    assert value < 1e-8
    assert (x.abs() < 1e-8).any()  # the prox is active: some coordinates of the solution vanish


# -- invariants whose violation is the classic bug ------------------------------------------------

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


# -- engine invariances for algorithms with client state ------------------------------------------

@pytest.mark.parametrize("algorithm", ["scaffold", "feddyn"])
def test_vmap_and_loop_executors_agree(algorithm):
    common = [*STOCHASTIC, f"algorithm={algorithm}", "rounds=3"]
    _, a = train(*common, "engine.executor=vmap")
    _, b = train(*common, "engine.executor=loop")
    for key in a.server:
        assert torch.allclose(a.server[key], b.server[key], rtol=0, atol=1e-12), key
    for name, table in a.tables.items():
        assert table.rows.keys() == b.tables[name].rows.keys()
        for i, row in table.rows.items():
            assert torch.allclose(row, b.tables[name].rows[i], rtol=0, atol=1e-12)


# -- communication --------------------------------------------------------------------------------

FLOATS_PER_CLIENT = {  # (down, up) in units of d per participating client per round
    "fedprox": (1, 1), "scaffold": (2, 2), "scaffold_prox": (2, 2), "feddyn": (1, 1), "fedcm": (2, 1),
    "fedavg/avgm": (1, 1), "fedavg/adam": (1, 1), "mime_svrg": (2, 2),
    "dsgd": (1, 1),
}


@pytest.mark.parametrize("algorithm", sorted(FLOATS_PER_CLIENT))
def test_floats_per_round(algorithm):
    fed = build(*STOCHASTIC, f"algorithm={algorithm}", "rounds=2")
    state = initial_state(fed)
    S, d = 3, fed.x0.numel()
    down, up = FLOATS_PER_CLIENT[algorithm]
    for _ in range(2):
        assert run_round(fed, state) == (down * S * d, up * S * d)
        state.round += 1


# -- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "overrides, words",
    [
        (["algorithm=fedprox", "algorithm.mu=-1"], "mu"),
        (["algorithm=scaffold", "algorithm.option=III"], "option"),
        (["algorithm=scaffold", "algorithm.regularizer=l2"], "regularizer"),
        (["algorithm=scaffold_prox", "algorithm.regularizer=nuclear", "algorithm.shape=[3,3]"], "shape"),
        (["algorithm=feddyn", "eta_g=0.5"], "eta_g"),
        (["algorithm=feddyn", "algorithm.alpha=0"], "alpha"),
        (["algorithm=fedcm", "algorithm.alpha=1.5"], "alpha"),
        (["algorithm=fedavg/avgm", "algorithm.server_opt.momentum=1"], "momentum"),
        (["algorithm=fedavg/adam", "algorithm.server_opt.beta2=1"], "beta2"),
        (["algorithm=fedavg/yogi", "algorithm.server_opt.tau=0"], "tau"),
        (["algorithm=fedavg/adagrad", "algorithm.server_opt.v0=-1"], "v0"),
        (["algorithm=fedavg", "algorithm.server_opt=adamw"], "server_opt 'adamw'. Available: adagrad, adam"),
        (["algorithm=fedavg/avgm", "+algorithm.server_opt.beta1=0.9"], "server_opt.beta1 for server_opt 'momentum'"),
    ],
)
def test_bad_hyperparameters_are_config_errors(overrides, words):
    with pytest.raises(ConfigError, match=words):
        build(*LSTSQ, "clients_per_round=3", *overrides)
