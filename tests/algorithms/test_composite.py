"""fedcomp, FedMid, FedDA, Fast-FedDA (papers/composite.md): the unit invariants of §7.1, and the figure
claims of §7.2 on synthetic sparse logistic regression at the smallest settings that show them.

The full settings (n = 10, m = 200, d = 60, R = 2000, 5 seeds) are the presets experiment=composite/fig2,
fig2_fedmid and fig3. TINY (n = 4, m = 30, d = 5) converges in tens of rounds; the full problem is used
where a claim needs it (tau = 1 coincidence of fedcomp and FedDA, FedMid against FedDA).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import make_cfg, run_history
from tests.problems import FULL_BATCH, LEAST_SQUARES, N, max_curvature, pooled_optimum
from fedbench.runs.build import build_federation
from fedbench.engine.loop import initial_state, run_round
from fedbench.core.errors import ConfigError

FIG2 = ["experiment=composite/fig2", "eval_every=0"]
TINY = [*FIG2, "dataset.num_users=4", "dataset.samples_per_user=30", "dataset.dim=5",
        "num_clients=4", "clients_per_round=4"]
LAM = 0.1


def _build(*overrides):
    fed, _ = build_federation(make_cfg(*overrides))
    return fed, initial_state(fed)


def _step(fed, state):
    run_round(fed, state)
    state.round += 1


def _errors(*overrides) -> np.ndarray:
    return np.array([r["stationarity"] for r in run_history(*overrides)])


# -- an independent closed form of the problem: f_i(x) = mean_j log(1 + exp(-b_ij a_ij^T x)) --------


class Logistic:
    def __init__(self, fed):
        data = fed.clients
        self.A = data.x[data.index]  # [n, m, d] (equal client sizes)
        self.b = 2 * data.y[data.index] - 1  # [n, m]

    def client_grads(self, x):  # x [d] -> [n, d]
        z = self.b * torch.einsum("nmd,d->nm", self.A, x)
        return torch.einsum("nm,nmd->nd", -self.b * torch.sigmoid(-z), self.A) / self.A.shape[1]

    def grad(self, x):
        return self.client_grads(x).mean(0)

    def residual(self, x, alpha=1.0):
        return torch.linalg.vector_norm(x - soft(x - alpha * self.grad(x), alpha * LAM))

    def lipschitz(self):
        return float(torch.linalg.eigvalsh(self.A.mT @ self.A / (4 * self.A.shape[1]))[:, -1].max())

    def stationary_point(self):
        """Centralised PGD to e <= 1e-13."""
        x, step = torch.zeros(self.A.shape[2], dtype=self.A.dtype), 1 / self.lipschitz()
        r0 = self.residual(x)
        for _ in range(100_000):
            x = soft(x - step * self.grad(x), step * LAM)
            if self.residual(x) <= 1e-13 * r0:
                return x
        raise AssertionError("PGD did not converge")


def soft(v, t):
    return torch.sign(v) * torch.clamp(v.abs() - t, min=0)


def svt(v, t, shape):
    U, S, Vh = np.linalg.svd(v.numpy().reshape(shape), full_matrices=False)
    return torch.from_numpy((U * np.maximum(S - t, 0)) @ Vh).reshape(-1)


# -- the data set --------------------------------------------------------------------------------------


def test_sparse_logreg_data_and_the_step_size_rule():
    """Binary labels, m samples per natural client, a fresh draw per seed, and eta_l = 1/L_max."""
    from fedbench.data import DATASETS
    from fedbench.data.sparse_logreg import logistic_smoothness

    make = DATASETS.get("sparse_logreg")
    data = make(num_users=3, samples_per_user=40, dim=7, seed=5)
    assert data.x_train.shape == (120, 7) and data.task == "binary"
    assert set(data.y_train.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(data.train_owner, torch.arange(3).repeat_interleave(40))
    assert torch.equal(make(num_users=3, samples_per_user=40, dim=7, seed=5).x_train, data.x_train)
    assert not torch.equal(make(num_users=3, samples_per_user=40, dim=7, seed=6).x_train, data.x_train)
    a = data.x_train[:40].double()
    assert logistic_smoothness(data) >= float(torch.linalg.eigvalsh(a.T @ a / 160)[-1])
    cfg = make_cfg(*TINY, "seed=3")
    fed, _ = build_federation(cfg)
    assert cfg.eta_l == pytest.approx(1 / Logistic(fed).lipschitz(), rel=1e-12)
    with pytest.raises(ConfigError):
        make(num_users=0)


# -- §7.1 unit invariants ---------------------------------------------------------------------------


def _corrections(fed, state):
    """c_i^r of every client, rebuilt from the broadcast as the clients do (L17-18)."""
    n = fed.clients.num_clients
    client = {k: t.gather(list(range(n)), fed.device) for k, t in state.tables.items()}
    return fed.algorithm.start(fed.algorithm.broadcast(state.server, state.round), client, state.round)[1]


@pytest.mark.parametrize("batch_size", [0, 5])
def test_corrections_average_to_zero_and_broadcast_carries_the_mean_gradient(batch_size):
    """§7.1, 1-2: (1/n) sum_i c_i^r = 0, and (x^r - z^{r+1}) / eta_tilde = (1/(n tau)) sum_i s_i^r."""
    fed, state = _build(*TINY, f"batch_size={batch_size}", "local_steps=5")
    for _ in range(6):
        x_before = state.server["x"].clone()
        _step(fed, state)
        grad_means = state.tables["grad_mean"].gather(list(range(4)), fed.device)
        average_gradient = (x_before - state.server["z"]) / state.server["eta_tilde"]
        assert torch.allclose(average_gradient, grad_means.mean(0), rtol=0, atol=1e-12)
        c = _corrections(fed, state)
        assert c.abs().max() > 1e-3  # the corrections are not trivially zero
        assert c.mean(0).abs().max() <= 1e-12


@pytest.mark.parametrize("regularizer", ["l1", "nuclear"])
def test_tau_one_is_centralized_proximal_gradient_descent(regularizer):
    """§7.1, 3: with tau = 1 and full gradients, x^r is PGD x <- P_{eta eta_g g}(x - eta eta_g grad f(x))."""
    eta, eta_g = 0.2, 1.5
    if regularizer == "l1":
        extra, prox = ["dataset.dim=5"], lambda v, t: soft(v, t * LAM)
    else:  # x = vec(X), X of shape 2 x 3
        extra = ["dataset.dim=6", "algorithm.regularizer.kind=nuclear", "+algorithm.regularizer.shape=[2,3]"]
        prox = lambda v, t: svt(v, t * LAM, (2, 3))  # noqa: E731
    fed, state = _build(*TINY, *extra, "local_steps=1", f"eta_l={eta}", f"eta_g={eta_g}")
    problem = Logistic(fed)
    x = torch.zeros(problem.A.shape[2], dtype=torch.float64)
    for _ in range(50):
        _step(fed, state)
        x = prox(x - eta * eta_g * problem.grad(x), eta * eta_g)
        assert (state.server["x"] - x).abs().max() <= 1e-12
    assert x.abs().max() > 0.1  # it moved


def _start_at_stationary_point(fed, state, problem, x_star):
    """Server and client state with x^r = x*, c_i^r = grad f(x*) - grad f_i(x*) (round r = 1)."""
    alg, n = fed.algorithm, fed.clients.num_clients
    tau = fed.local_steps
    eta_tilde = fed.eta_l * fed.algorithm.setting.eta_g * tau
    G = problem.client_grads(x_star)
    state.server.update(x=x_star.clone(), z=x_star - eta_tilde * G.mean(0),
                        eta_tilde=torch.tensor(eta_tilde, dtype=torch.float64))
    state.tables["x_prev"].scatter(list(range(n)), x_star.expand(n, -1))
    state.tables["grad_mean"].scatter(list(range(n)), G)
    state.round = 1
    assert alg.reg.prox(state.server["z"], eta_tilde).sub(x_star).abs().max() <= 1e-12  # x^r = x*
    return G.mean(0) - G


@pytest.fixture(scope="module")
def tiny_stationary_point():
    fed, _ = _build(*TINY, "seed=2")
    problem = Logistic(fed)
    return problem.stationary_point()


@pytest.mark.parametrize("schedule", ["linear", "constant", "server"])
def test_stationary_point_is_a_fixed_point_only_with_the_linear_prox_schedule(schedule, tiny_stationary_point):
    """§7.1, 4: (x*, grad f(x*) - grad f_i(x*)) is an exact fixed point of fedcomp (tau = 5, eta_g = 2);
    with a constant local prox parameter (or eta_tilde at every step) it is not."""
    fed, state = _build(*TINY, "seed=2", f"algorithm.local_prox_schedule={schedule}")
    x_star = tiny_stationary_point
    assert int((x_star != 0).sum()) < len(x_star)  # the prox is active at x*
    c = _start_at_stationary_point(fed, state, Logistic(fed), x_star)
    assert torch.allclose(_corrections(fed, state), c, rtol=0, atol=1e-12)
    _step(fed, state)
    moved = (state.server["x"] - x_star).abs().max()
    if schedule == "linear":
        assert moved <= 1e-12
        assert torch.allclose(_corrections(fed, state), c, rtol=0, atol=1e-12)
    else:
        assert moved > 1e-6


def test_one_client_stops_at_a_stationary_point():
    """§7.1, 5 (Appendix A.2): n = 1, eta_g = 1, full gradients, started at x*: the iterates stay."""
    fed, state = _build(*FIG2, "dataset.num_users=1", "dataset.samples_per_user=40", "dataset.dim=5",
                        "num_clients=1", "clients_per_round=1", "eta_g=1", "seed=3")
    x_star = Logistic(fed).stationary_point()
    assert int((x_star != 0).sum()) < len(x_star)
    state.server.update(x=x_star.clone(), z=x_star.clone())
    for _ in range(3):
        _step(fed, state)
        assert (state.server["x"] - x_star).abs().max() <= 1e-12


def test_smooth_case_converges_exactly_on_heterogeneous_least_squares():
    """§7.1, 6 (g = 0): the drift correction gives the exact optimum with tau = 5 local steps, where
    FedAvg's fixed point is biased."""
    common = [*LEAST_SQUARES, f"clients_per_round={N}", *FULL_BATCH, "eta_g=2"]
    fed = _build(*common, "algorithm=fedavg")[0]
    L_max, optimum = max_curvature(fed), pooled_optimum(fed)
    common.append(f"eta_l={1 / L_max!r}")
    fed, state = _build(*common, "algorithm=fedcomp", "algorithm.regularizer.kind=none", "algorithm.stationarity_every=0")
    for _ in range(150):
        _step(fed, state)
    assert (state.server["x"] - optimum).abs().max() <= 1e-11

    fed_avg, state_avg = _build(*common, "algorithm=fedavg")
    for _ in range(40):
        _step(fed_avg, state_avg)
    assert (state_avg.server["x"] - optimum).abs().max() > 0.1


@pytest.mark.parametrize("algorithm", ["fedcomp", "fedda", "fastfedda"])
def test_stationarity_metric_is_the_relative_prox_gradient_residual(algorithm):
    """The logged `stationarity` is ||x - P_g(x - grad f(x))|| / (same at x^0) on the evaluated model,
    with F(x) = f(x) + lam ||x||_1 and the number of non-zeros beside it."""
    fed, state = _build(*TINY, f"algorithm={algorithm}")
    problem = Logistic(fed)
    for _ in range(3):
        _step(fed, state)
    x = fed.algorithm.model(state.server)
    metrics = fed.algorithm.metrics(state.server)
    expected = problem.residual(x) / problem.residual(torch.zeros_like(x))
    assert metrics["stationarity"] == pytest.approx(float(expected), rel=1e-10)
    loss = torch.nn.functional.softplus(-problem.b * torch.einsum("nmd,d->nm", problem.A, x)).mean()
    assert metrics["objective"] == pytest.approx(float(loss + LAM * x.abs().sum()), rel=1e-10)
    assert metrics["nnz"] == int((x != 0).sum())


def test_metric_every_k_rounds_and_chunking_does_not_change_fedcomp():
    a = run_history(*TINY, "rounds=4", "engine.client_chunk=0", "algorithm.stationarity_every=2")
    b = run_history(*TINY, "rounds=4", "engine.client_chunk=3", "algorithm.stationarity_every=2")
    assert ["stationarity" in r for r in a] == [False, True, False, True]
    assert [r["stationarity"] for r in a[1::2]] == pytest.approx([r["stationarity"] for r in b[1::2]], rel=1e-12)


@pytest.mark.parametrize("override", [
    "clients_per_round=3",  # fedcomp: full participation only (§2.6)
    "algorithm.local_prox_schedule=lineer",
    "algorithm.regularizer.kind=l2",
    "algorithm.regularizer.lam=-1",
    "+algorithm.regularizer.weight=1",
    "algorithm.stationarity_alpha=0",
])
def test_bad_settings_are_config_errors(override):
    with pytest.raises(ConfigError):
        build_federation(make_cfg(*TINY, override))


def test_unequal_local_work_is_a_config_error():
    with pytest.raises(ConfigError, match="local steps"):
        run_history(*TINY, "partition=dirichlet", "local_steps=null", "local_epochs=1", "batch_size=8", "rounds=1")


def test_the_baselines_accept_partial_participation():
    history = run_history(*TINY, "algorithm=fedda", "clients_per_round=2", "rounds=2")
    assert history[-1]["stationarity"] < 1


# -- §7.2 figure claims -----------------------------------------------------------------------------


def test_fig2_left_tau1_fedcomp_and_fedda_converge_at_the_same_rate():
    """§7.2, 9 (full problem, seed 1, 60 rounds): |log10(e^fedcomp / e^FedDA)| <= 0.05 at every round,
    both decreasing at every round from round 10 on."""
    comp = _errors(*FIG2, "local_steps=1", "seed=1", "rounds=60")
    da = _errors(*FIG2, "local_steps=1", "seed=1", "rounds=60", "algorithm=fedda")
    assert np.abs(np.log10(comp / da)).max() <= 0.05
    for e in (comp, da):
        assert (e[10:][1:] < e[10:][:-1]).all()
    assert comp[-1] < 0.2 * comp[0]


def test_fig2_left_tau1_fedcomp_and_fedda_reach_the_float64_floor():
    """§7.2, 9: at tau = 1 with full gradients both "converge to machine precision" (TINY, seed 2,
    eta = 1/L_max, 500 rounds): e_R <= 1e-12, the float64 floor. FedDA's prox parameter a, the sum of
    eta_s eta_c tau, must stay float64: accumulated through a float32 product it stalled at 2e-8."""
    for algorithm in ("fedcomp", "fedda"):
        e = _errors(*TINY, "seed=2", "local_steps=1", "rounds=500", f"algorithm={algorithm}")
        assert e[-1] <= 1e-12, (algorithm, e[::100])


@pytest.fixture(scope="module")
def tiny_tau1():
    """TINY, seed 2, tau = 1, 120 rounds."""
    return {a: _errors(*TINY, "seed=2", "local_steps=1", "rounds=120", f"algorithm={a}")
            for a in ("fedcomp", "fedda", "fastfedda")}


def test_fig2_left_tau1_fedmid_and_fast_fedda_are_slower(tiny_tau1):
    """§7.2, 10-11 (TINY, seed 2): FedMid plateaus (e_R >= 0.05, >= 10x FedDA); Fast-FedDA >= 5x fedcomp."""
    fedmid = _errors(*TINY, "experiment=composite/fig2_fedmid", "seed=2", "local_steps=1", "rounds=120")
    assert fedmid[-1] >= 0.05 and fedmid[-1] >= 10 * tiny_tau1["fedda"][-1]
    assert tiny_tau1["fastfedda"][-1] >= 5 * tiny_tau1["fedcomp"][-1]


@pytest.fixture(scope="module")
def tiny_tau5():
    """TINY, seed 2, tau = 5, 70 rounds."""
    runs = {a: _errors(*TINY, "seed=2", "rounds=70", f"algorithm={a}") for a in ("fedcomp", "fedda", "fastfedda")}
    runs["constant"] = _errors(*TINY, "seed=2", "rounds=70", "algorithm.local_prox_schedule=constant")
    return runs


def test_fig2_right_tau5_fedcomp_reaches_machine_precision_while_fedda_stalls(tiny_tau5):
    """§7.2, 12-14 (TINY, seed 2): fedcomp's e_R is at machine precision; FedDA stays >= 5e-4 and
    >= 50x fedcomp; Fast-FedDA >= 10x fedcomp."""
    comp = tiny_tau5["fedcomp"]
    assert comp[-1] <= 1e-13
    assert tiny_tau5["fedda"].min() >= 5e-4 and tiny_tau5["fedda"][-1] >= 50 * comp[-1]
    assert tiny_tau5["fastfedda"][-1] >= 10 * comp[-1]


def test_fig2_right_tau5_fedmid_is_worse_than_fedda():
    """§7.2, 14 (full problem, seed 1, 40 rounds): e_R^FedMid >= 3 e_R^FedDA."""
    fedmid = _errors(*FIG2, "experiment=composite/fig2_fedmid", "seed=1", "rounds=40")
    fedda = _errors(*FIG2, "algorithm=fedda", "seed=1", "rounds=40")
    assert fedda.min() >= 5e-4
    assert fedmid[-1] >= 3 * fedda[-1]


def test_local_updates_pay_off_for_fedcomp(tiny_tau1, tiny_tau5):
    """§7.2, 15 (TINY, seed 2): tau = 5 reaches e <= 1e-4 in at most half the rounds tau = 1 needs."""
    first = {tau: int(np.argmax(e <= 1e-4)) + 1 for tau, e in ((1, tiny_tau1["fedcomp"]), (5, tiny_tau5["fedcomp"]))}
    assert (tiny_tau1["fedcomp"] <= 1e-4).any()
    assert first[5] <= first[1] / 2


def test_the_linear_local_prox_schedule_matters(tiny_tau5):
    """§7.2, 16 (TINY, seed 2): a constant local prox parameter stalls at e_R >= 1e-3, >= 10x linear."""
    assert tiny_tau5["constant"][-1] >= 1e-3
    assert tiny_tau5["constant"][-1] >= 10 * tiny_tau5["fedcomp"][-1]


def test_fig3_a_larger_minibatch_lowers_the_error_floor():
    """§7.2, 17-18 (TINY with m = 60, seed 1, tau = 5, 80 rounds; mean e over the last 40): b = 20 gives
    at most 1/3 of fedcomp's b = 1 floor, and fedcomp's b = 20 floor is at least 2x below FedDA's."""
    fig3 = [*TINY, "experiment=composite/fig3", "dataset.samples_per_user=60", "seed=1", "rounds=80"]
    floor = {(a, b): _errors(*fig3, f"algorithm={a}", f"batch_size={b}")[-40:].mean()
             for a, b in (("fedcomp", 1), ("fedcomp", 20), ("fedda", 20))}
    assert floor["fedcomp", 20] <= floor["fedcomp", 1] / 3
    assert floor["fedda", 20] >= 2 * floor["fedcomp", 20]
    assert floor["fedcomp", 20] > 1e-6  # a noise floor, not exact convergence
