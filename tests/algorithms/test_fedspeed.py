"""FedSpeed / FedSpeed-Ing: the thesis's Lemmas 1-2, the perturbation geometry, reductions to FedDyn
and FedSpeed, and exact convergence on heterogeneous least squares (spec papers/fedspeed.md §7.2)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_cfg
from tests.problems import FULL_BATCH, LEAST_SQUARES, client_data, pooled_optimum
from fedbench.runs.build import build_federation
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run
from fedbench.core.streams import sample_cohort
from fedbench.core.errors import ConfigError

LSTSQ = [*LEAST_SQUARES, "dataset.dim=5", *FULL_BATCH, "eta_l=0.05"]
EXACT = ["weight_decay=0", "grad_clip=0", "algorithm.mu=3"]


class RecordingWork:
    """A LocalWork whose gradient calls are recorded (point, gradient, batch)."""

    def __init__(self, work: LocalWork):
        self._work = work
        self.calls: list[tuple[torch.Tensor, torch.Tensor, object]] = []

    def __getattr__(self, name):
        return getattr(self._work, name)

    def grad(self, X, batch):
        G, loss = self._work.grad(X, batch)
        self.calls.append((X.clone(), G.clone(), batch))
        return G, loss


def _clip(G, c):
    return G * torch.clamp(c / (G.norm(dim=1, keepdim=True) + 1e-6), max=1.0)


def _final_x(*overrides):
    fed, _ = build_federation(make_cfg(*overrides))
    return fed, run(fed).server["x"]


def test_lemmas_1_and_2_and_perturbation_geometry():
    """x_K - x^t = -lambda gamma sum_k (gamma_k/gamma) g~_k + gamma lambda g_hat^{t-1}   (eq. 3.22)
    g_hat^t = (1 - gamma) g_hat^{t-1} + gamma sum_k (gamma_k/gamma) g~_k             (eq. 3.23)
    with g~_k the clipped mixed gradient plus weight decay, on a small MLP with real minibatches."""
    mu, rho0, alpha, wd, clip, lr, K = 0.5, 0.05, 0.7, 1e-2, 0.4, 0.1, 7
    fed, _ = build_federation(make_cfg(
        "model=mlp_2nn", "model.hidden=8", "engine.dtype=float64", "num_clients=4", "clients_per_round=2",
        "algorithm=fedspeed", f"algorithm.mu={mu}", f"algorithm.rho0={rho0}", f"algorithm.alpha={alpha}",
        f"weight_decay={wd}", f"grad_clip={clip}",
    ))
    algo = fed.algorithm
    x = initial_state(fed).server["x"]
    ids = torch.tensor([1, 3])
    work = RecordingWork(LocalWork(fed.clients, ids, 0, lr, 16, None, K, extras=fed.algorithm.setting.extras))
    h_old = 0.1 * torch.randn(2, fed.flat.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    up, new = algo.client_update({"x": x}, {"h": h_old}, work)

    assert len(work.calls) == 2 * K  # two gradients per step with the perturbation on
    g_tilde = []
    for k in range(K):
        (X1, G1, b1), (X2, G2, b2) = work.calls[2 * k], work.calls[2 * k + 1]
        assert b1 is b2  # the ascent gradient uses the same minibatch
        radius = (X2 - X1).norm(dim=1)
        assert torch.allclose(radius, torch.full_like(radius, rho0), rtol=1e-6)
        g_tilde.append(_clip((1 - alpha) * G1 + alpha * G2, clip) + wd * X1)
    assert any((G.norm(dim=1) > clip).any() for _, G, _ in work.calls)  # clipping is exercised

    lam, q = 1 / mu, 1 - lr * mu
    gam_k = [lr * mu * q ** (K - 1 - k) for k in range(K)]
    gamma = 1 - q**K
    assert abs(sum(gam_k) - gamma) < 1e-14
    avg = sum(gk * g for gk, g in zip(gam_k, g_tilde))  # gamma * sum_k (gamma_k/gamma) g~_k
    g_hat_old = -mu * h_old  # h = -lambda g_hat
    offset = up["delta"]
    assert torch.allclose(offset, -lam * avg + gamma * lam * g_hat_old, rtol=1e-10, atol=1e-12)  # Lemma 1
    assert torch.allclose(-mu * new["h"], (1 - gamma) * g_hat_old + avg, rtol=1e-10, atol=1e-12)  # Lemma 2


def test_one_gradient_per_step_without_perturbation():
    fed, _ = build_federation(make_cfg("algorithm=fedspeed", "algorithm.rho0=0", "num_clients=4", "clients_per_round=2"))
    work = RecordingWork(LocalWork(fed.clients, torch.tensor([0, 2]), 0, 0.1, 16, None, 3))
    fed.algorithm.client_update({"x": fed.x0}, {"h": torch.zeros(2, fed.flat.dim)}, work)
    assert len(work.calls) == 3


@pytest.mark.parametrize("mode", ["data_grad", "official"])
def test_one_local_step_with_each_clip_mode(mode):
    """data_grad clips g~ alone; the official code clips g~ + mu (h_i - x^t) and adds (wd + mu) x unclipped (A6)."""
    mu, wd, clip, lr = 0.5, 1e-2, 0.3, 0.1
    fed, _ = build_federation(make_cfg("algorithm=fedspeed", "algorithm.rho0=0", f"algorithm.mu={mu}",
                                       f"weight_decay={wd}", f"grad_clip={clip}",
                                       f"algorithm.clip_mode={mode}", "engine.dtype=float64", "num_clients=4",
                                       "clients_per_round=2"))
    x = fed.x0
    h = torch.randn(2, fed.flat.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    work = LocalWork(fed.clients, torch.tensor([0, 1]), 0, lr, 16, None, 1, extras=fed.algorithm.setting.extras)
    G, _ = work.grad(x.expand(2, -1), work.batch(0))
    up, _ = fed.algorithm.client_update({"x": x}, {"h": h}, work)
    assert (G.norm(dim=1) > clip).all()  # the clip is active
    if mode == "data_grad":
        step = _clip(G, clip) + wd * x + mu * h  # x_0 = x^t: the prox term is zero
    else:
        step = _clip(G + mu * (h - x), clip) + (wd + mu) * x
    assert torch.allclose(up["delta"], -lr * step, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("switch", ["algorithm.rho0=0", "algorithm.alpha=0", "algorithm.use_perturbation=false"])
def test_without_perturbation_fedspeed_is_feddyn(switch):
    """FedDyn (spec §3.6, h-form) written out: K steps x <- x - lr (grad f_i + wd x + a h_i + a (x - x^t)),
    h_i += x_K - x^t, x^{t+1} = mean_S x_K + (1/M) sum_j h_j; partial participation, 4 rounds."""
    a, wd, lr, K, N, S, rounds = 0.7, 1e-3, 0.05, 5, 8, 3, 4
    fed, x_run = _final_x(*LSTSQ, "algorithm=fedspeed", switch, f"algorithm.mu={a}", f"weight_decay={wd}",
                          "grad_clip=0", f"clients_per_round={S}", f"rounds={rounds}")
    x = fed.x0.clone()
    h = torch.zeros(N, fed.flat.dim, dtype=torch.float64)
    for r in range(rounds):
        ids = sample_cohort(fed.seed, r, N, S).tolist()
        finals = []
        for i in ids:
            work = LocalWork(fed.clients, torch.tensor([i]), r, lr, 0, None, K)
            xi = x.clone()
            for t in range(K):
                g = work.grad(xi[None], work.batch(t))[0][0]  # the full local batch
                xi = xi - lr * (g + wd * xi + a * h[i] + a * (xi - x))
            h[i] += xi - x
            finals.append(xi)
        x = torch.stack(finals).mean(0) + h.mean(0)
    assert torch.allclose(x_run, x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["all", "participating"])
def test_fedspeed_ing_with_zero_zeta_is_fedspeed(mode):
    common = ["model=mlp_2nn", "model.hidden=8", "engine.dtype=float64", "num_clients=6", "clients_per_round=3",
              "rounds=3", "local_epochs=null", "local_steps=4", "batch_size=16", "eval_every=0",
              f"algorithm.server_correction_avg={mode}"]
    _, x_speed = _final_x(*common, "algorithm=fedspeed")
    _, x_ing = _final_x(*common, "algorithm=fedspeed_ing", "algorithm.zeta=0")
    _, x_ing_anchor = _final_x(*common, "algorithm=fedspeed_ing", "algorithm.zeta=0",
                               "algorithm.ing_correction_anchor=x_tilde", "algorithm.ing_init_from_lookahead=true")
    _, x_moving = _final_x(*common, "algorithm=fedspeed_ing", "algorithm.zeta=0.3")
    assert torch.equal(x_speed, x_ing) and torch.equal(x_speed, x_ing_anchor)
    assert not torch.allclose(x_speed, x_moving)  # zeta acts


def test_exact_optimum_where_fedavg_and_fedprox_stay_biased():
    """Heterogeneous least squares, full participation, deterministic gradients: FedSpeed without
    perturbation (= FedDyn) reaches the global minimiser; FedAvg and FedProx (FedSpeed with only
    the prox-term, Table 4.6) keep a client-drift bias."""
    fed, x_speed = _final_x(*LSTSQ, "clients_per_round=8", "rounds=200", "algorithm=fedspeed", "algorithm.rho0=0", *EXACT)
    x_star = pooled_optimum(fed)
    scale = float(x_star.norm())
    assert float((x_speed - x_star).norm()) <= 1e-12 * scale  # the float64 floor
    _, x_avg = _final_x(*LSTSQ, "clients_per_round=8", "rounds=150", "algorithm=fedavg")
    _, x_prox = _final_x(*LSTSQ, "clients_per_round=8", "rounds=150", "algorithm=fedspeed", "algorithm.rho0=0",
                         "algorithm.use_correction=false", *EXACT)
    assert float((x_avg - x_star).norm()) > 0.05 * scale
    assert float((x_prox - x_star).norm()) > 0.05 * scale


def test_partial_participation_all_mode_converges_to_the_optimum():
    """Spec C8: the server correction averaged over all M clients keeps the optimum a fixed point
    at 50% participation."""
    fed, x = _final_x(*LSTSQ, "clients_per_round=4", "rounds=400", "algorithm=fedspeed", "algorithm.rho0=0", *EXACT)
    x_star = pooled_optimum(fed)
    assert float((x - x_star).norm()) <= 1e-12 * float(x_star.norm())  # the float64 floor


def test_raw_perturbation_fixed_point():
    """With raw radius rho, alpha = 1 and quadratic f_i, g~_i(x) = grad f_i(x + rho grad f_i(x))
    = (I + rho H_i) grad f_i(x), so FedSpeed's fixed point solves sum_i (I + rho H_i) grad f_i(x) = 0."""
    rho = 0.02
    fed, x = _final_x(*LSTSQ, "clients_per_round=8", "rounds=150", "algorithm=fedspeed", "algorithm.rho_mode=raw",
                      f"algorithm.rho0={rho}", *EXACT)
    lhs, rhs = 0, 0
    for A, y in (client_data(fed, i) for i in range(fed.clients.num_clients)):
        H = 2 * A.T @ A / len(y)  # f_i = mean (<a, x> - y)^2
        M = torch.eye(len(H), dtype=H.dtype) + rho * H
        lhs, rhs = lhs + M @ H, rhs + M @ (2 * A.T @ y / len(y))
    x_rho = torch.linalg.solve(lhs, rhs)
    x_star = pooled_optimum(fed)
    assert float((x - x_rho).norm()) < 1e-8 * float(x_rho.norm())
    assert float((x_rho - x_star).norm()) > 1e-4 * float(x_star.norm())  # the perturbation moves it


@pytest.mark.parametrize("override", ["algorithm.mu=0", "algorithm.alpha=1.5", "algorithm.rho_mode=adaptive",
                                      "algorithm.server_correction_avg=some", "algorithm.clip_mode=all"])
def test_bad_values_are_config_errors(override):
    with pytest.raises(ConfigError):
        build_federation(make_cfg("algorithm=fedspeed", override))


def test_bad_ing_anchor_is_a_config_error():
    with pytest.raises(ConfigError, match="ing_correction_anchor"):
        build_federation(make_cfg("algorithm=fedspeed_ing", "algorithm.ing_correction_anchor=z"))
