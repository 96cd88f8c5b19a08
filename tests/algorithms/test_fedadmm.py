"""FedADMM (fedadmm.md §7 targets 3-5): the special cases FedADMM -> FedProx -> FedAvg -> FedSGD,
message identities and invariants, system heterogeneity, and the convex fixed points of §2.8."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import advance, build
from tests.problems import LEAST_SQUARES, max_curvature
from fedbench.algorithms import load_all
from fedbench.algorithms.common import heterogeneous_epochs
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run_round
from fedbench.core.streams import TAG_ALGO, sample_cohort, uniform
from fedbench.core.errors import ConfigError

LSTSQ = [*LEAST_SQUARES, "clients_per_round=3", "batch_size=8", "local_epochs=3", "eta_l=0.02"]


def final_x(*overrides, rounds=4):
    fed = build(*overrides)
    return advance(fed, initial_state(fed), rounds).server["x"]


# -- target 3: special cases ----------------------------------------------------------------------

def test_heterogeneous_epochs_are_uniform_on_one_to_E_and_mask_local_work():
    fed = build(*LSTSQ, "num_clients=8")
    draws = []
    for r in range(40):
        work = LocalWork(fed.clients, torch.arange(8), r, 0.1, 8, torch.full((8,), 4), None)
        E = heterogeneous_epochs(work)
        assert torch.equal(work.with_epochs(E).steps, E * work.steps_per_epoch)
        draws.append(E)
    counts = torch.bincount(torch.cat(draws), minlength=5)
    assert counts[0] == 0 and bool((counts[1:] > 50).all())  # every E_i in {1..4}, each often


def test_fedadmm_without_duals_is_fedprox_with_heterogeneous_epochs_and_momentum():
    """FedProx (Li et al. 2020) written out client by client with torch.optim.SGD(momentum): local
    objective f_i + rho/2 ||w - theta||^2 for E_i ~ U{1..E} epochs from theta; theta = mean w_i."""
    rho, mu, lr, R = 0.3, 0.5, 0.02, 3
    fed = build(*LSTSQ, "algorithm=fedadmm", f"algorithm.rho={rho}", f"local_momentum={mu}",
                "algorithm.dual_update=false")
    state = advance(fed, initial_state(fed), R)
    theta, epochs = fed.x0.clone(), set()
    for r in range(R):
        ids = torch.as_tensor(sample_cohort(fed.seed, r, 8, 3))
        work = LocalWork(fed.clients, ids, r, lr, 8, torch.full((3,), 3), None)
        work = work.with_epochs(heterogeneous_epochs(work))
        epochs.update(work.epochs.tolist())
        theta = torch.stack([prox_sgd(work, k, theta, int(work.steps[k]), lr, mu, rho) for k in range(3)]).mean(0)
    assert torch.allclose(state.server["x"], theta, rtol=0, atol=1e-12)
    assert len(epochs) > 1  # the clients did unequal work


@pytest.mark.skipif("fedprox" not in load_all(), reason="FedProx is on branch `baselines`")
def test_fedadmm_without_duals_is_the_registered_fedprox_bit_for_bit():
    common = [*LSTSQ, "local_momentum=0", "algorithm.hetero_epochs=false"]
    a = final_x(*common, "algorithm=fedadmm", "algorithm.dual_update=false", "algorithm.rho=0.3")
    b = final_x(*LSTSQ, "algorithm=fedprox", "algorithm.mu=0.3")
    assert torch.equal(a, b)


def prox_sgd(work, k, theta, steps, lr, momentum, rho):
    """Client k of `work` by hand: `steps` steps of torch.optim.SGD(momentum) on f_k + rho/2 |w - theta|^2 from theta."""
    w = theta.clone().requires_grad_(True)
    opt = torch.optim.SGD([w], lr=lr, momentum=momentum)
    for t in range(steps):
        b = work.batch(t)
        g, _ = work.grad(w.detach()[None], type(b)(b.x[k : k + 1], b.y[k : k + 1], b.w[k : k + 1]))
        w.grad = g[0] + rho * (w.detach() - theta)
        opt.step()
    return w.detach()


def _fedprox_by_hand(fed, rounds, mu, lr, momentum, E, hetero):
    """FedProx written out client by client (Li et al. eq. 2 under torch.optim.SGD(momentum), from theta;
    theta = mean w_i). hetero: client i of round r runs E_i = 1 + floor(E u) epochs, u the uniform of the
    algorithms' stream (seed, r, i, TAG_ALGO, 12), the one FedADMM draws its E_i from; else E epochs.
    Returns theta and the epochs each client ran."""
    theta, ran = fed.x0.clone(), []
    for r in range(rounds):
        ids = torch.as_tensor(sample_cohort(fed.seed, r, 8, 3))
        work = LocalWork(fed.clients, ids, r, lr, 8, torch.full((3,), E), None)  # batches of epochs 1..E
        epochs = (uniform(fed.seed, r, ids, TAG_ALGO, 12) * E).floor().long() + 1 if hetero else torch.full((3,), E)
        ran += [int(e) for e in epochs]
        theta = torch.stack([prox_sgd(work, k, theta, int(epochs[k] * work.steps_per_epoch[k]), lr, momentum, mu)
                             for k in range(3)]).mean(0)
    return theta, ran


def test_fedprox_hetero_epochs_runs_each_client_its_own_E_i_from_fedadmm_stream():
    """issue 36: the FedADMM paper (§V-A) gives FedProx FedADMM's E_i ~ U{1..E}: client i runs exactly E_i
    epochs, the E_i of FedADMM under the same seed (FedADMM without duals is then FedProx bit for bit)."""
    mu, m, lr, R = 0.3, 0.5, 0.02, 3
    prox = [*LSTSQ, "algorithm=fedprox", f"algorithm.mu={mu}", f"local_momentum={m}"]
    fed = build(*prox, "algorithm.hetero_epochs=true")
    x = advance(fed, initial_state(fed), R).server["x"]
    theta, ran = _fedprox_by_hand(fed, R, mu, lr, m, 3, hetero=True)
    assert torch.allclose(x, theta, rtol=0, atol=1e-12)
    assert len(set(ran)) > 1  # unequal work: the test would see fixed epochs
    admm = final_x(*LSTSQ, "algorithm=fedadmm", "algorithm.dual_update=false", f"algorithm.rho={mu}",
                   f"local_momentum={m}", "algorithm.hetero_epochs=true", rounds=R)
    assert torch.equal(x, admm)  # the same E_i: one stream for both algorithms
    fixed, _ = _fedprox_by_hand(fed, R, mu, lr, m, 3, hetero=False)
    assert torch.allclose(final_x(*prox, rounds=R), fixed, rtol=0, atol=1e-12)  # the default: a fixed E
    assert not torch.allclose(x, fixed, rtol=0, atol=1e-6)


def test_fedprox_with_mu_zero_and_fixed_epochs_is_fedavg_bit_for_bit():
    assert torch.equal(final_x(*LSTSQ, "algorithm=fedprox", "algorithm.mu=0", "algorithm.hetero_epochs=false"),
                       final_x(*LSTSQ, "algorithm=fedavg"))
    with pytest.raises(ConfigError, match="local_epochs=null"):
        build(*LSTSQ, "local_epochs=null", "local_steps=3", "algorithm=fedprox", "algorithm.hetero_epochs=true")


def test_fedadmm_with_rho_zero_no_duals_fixed_epochs_is_fedavg_bit_for_bit():
    a = final_x(*LSTSQ, "algorithm=fedadmm", "algorithm.rho=0", "algorithm.dual_update=false",
                "algorithm.hetero_epochs=false", "local_momentum=0")
    b = final_x(*LSTSQ, "algorithm=fedavg")
    assert torch.equal(a, b)
    assert not torch.equal(a, final_x(*LSTSQ, "algorithm=fedadmm", "algorithm.rho=0", "algorithm.dual_update=false",
                                      "algorithm.hetero_epochs=false", "local_momentum=0.5"))


def test_one_full_batch_epoch_is_fedsgd_whatever_the_momentum():
    full = [*LSTSQ, "batch_size=0", "local_epochs=1"]
    sgd = final_x(*full, "algorithm=fedsgd")
    assert torch.allclose(final_x(*full, "algorithm=fedavg"), sgd, rtol=0, atol=1e-13)
    admm = final_x(*full, "algorithm=fedadmm", "algorithm.rho=0", "algorithm.dual_update=false",
                   "algorithm.hetero_epochs=false", "local_momentum=0.5")
    assert torch.allclose(admm, sgd, rtol=0, atol=1e-13)


# -- target 4: message identities ------------------------------------------------------------------

def test_global_init_message_is_twice_the_local_displacement():
    fed = build(*LSTSQ, "algorithm=fedadmm", "algorithm.rho=0.1")
    state = advance(fed, initial_state(fed), 2)  # non-zero duals
    ids = [0, 3, 5]
    client = {"y": state.tables["y"].gather(ids, fed.device)}
    work = LocalWork(fed.clients, torch.tensor(ids), 2, 0.02, 8, torch.full((3,), 3), None)
    up, new = fed.algorithm.client_update({"x": state.server["x"]}, client, work)
    displacement = (new["y"] - client["y"]) / 0.1  # = w_i^{t+1} - theta^t
    assert float(displacement.norm()) > 1e-3
    assert torch.allclose(up["delta"], 2 * displacement, atol=1e-10)


def test_global_init_dual_sum_tracks_the_server_drift():
    """local_init=global: sum_i y_i^t = (rho S / (2 eta)) (theta^t - theta^0) after every round (§2.8)."""
    rho, eta = 0.2, 0.7
    fed = build(*LSTSQ, "algorithm=fedadmm", f"algorithm.rho={rho}", f"eta_g={eta}")

    def check(st):
        dual_sum = sum(st.tables["y"].rows.values())
        assert torch.allclose(dual_sum, rho * 3 / (2 * eta) * (st.server["x"] - fed.x0), atol=1e-12)

    advance(fed, initial_state(fed), 5, check)


def test_local_init_with_participation_step_keeps_theta_the_mean_augmented_model():
    """local_init=local, eta = S/N: theta^t = (1/N) sum_i (w_i^t + y_i^t / rho) over all N clients,
    never-selected clients at (theta^0, 0); inactive clients' (w_i, y_i) do not change."""
    rho, N = 0.5, 8
    fed = build(*LSTSQ, "algorithm=fedadmm", f"algorithm.rho={rho}", "algorithm.local_init=local",
                "algorithm.server_step=participation")
    previous = {}

    def check(st):
        w = [st.tables["w"].rows.get(i, fed.x0) for i in range(N)]
        y = [st.tables["y"].rows.get(i, torch.zeros_like(fed.x0)) for i in range(N)]
        mean_u = sum(wi + yi / rho for wi, yi in zip(w, y)) / N
        assert torch.allclose(st.server["x"], mean_u, atol=1e-12)
        cohort = set(sample_cohort(fed.seed, st.round - 1, N, 3).tolist())
        for i, (wi, yi) in previous.items():
            if i not in cohort:
                assert torch.equal(st.tables["w"].rows[i], wi) and torch.equal(st.tables["y"].rows[i], yi)
        previous.update({i: (st.tables["w"].rows[i].clone(), st.tables["y"].rows[i].clone()) for i in st.tables["w"].rows})

    advance(fed, initial_state(fed), 6, check)


def test_upload_and_download_are_d_floats_per_client():
    fed = build(*LSTSQ, "algorithm=fedadmm", "algorithm.local_init=local")
    assert run_round(fed, initial_state(fed)) == (3 * fed.flat.dim, 3 * fed.flat.dim)


def test_chunking_does_not_change_heterogeneous_runs():
    common = [*LSTSQ, "algorithm=fedadmm", "algorithm.local_init=local"]
    assert torch.equal(final_x(*common, "engine.client_chunk=1"), final_x(*common, "engine.client_chunk=0"))


def test_bad_values_are_config_errors():
    with pytest.raises(ConfigError, match="local_init"):
        build(*LSTSQ, "algorithm=fedadmm", "algorithm.local_init=warm")
    with pytest.raises(ConfigError, match="momentum"):
        build(*LSTSQ, "algorithm=fedadmm", "local_momentum=1.5")
    with pytest.raises(ConfigError, match="local_epochs=null"):  # before any work, not at the first round
        build(*LSTSQ, "local_epochs=null", "local_steps=3", "algorithm=fedadmm")
    build(*LSTSQ, "local_epochs=null", "local_steps=3", "algorithm=fedadmm", "algorithm.hetero_epochs=false")


# -- target 5: convex fixed points (§2.8) -----------------------------------------------------------

CONVEX = [*LEAST_SQUARES, "dataset.dim=4", "dataset.samples_per_user=40", "clients_per_round=4", "batch_size=0",
          "algorithm.hetero_epochs=false", "local_momentum=0"]


def _grad_F(fed, x):
    """grad F = sum_i grad f_i (problem (1))."""
    N = fed.clients.num_clients
    G, _ = LocalWork(fed.clients, torch.arange(N), 0, 0.0, 0, None, 1).full_grad(x.expand(N, -1))
    return G.sum(0)


def _convex_run(rounds, rho_over_L, steps, *overrides):
    L = max_curvature(build(*CONVEX, "algorithm=fedadmm"))
    rho = rho_over_L * L  # local GD at lr 1/(L + rho): each step contracts by <= L / (L + rho)
    fed = build(*CONVEX, "algorithm=fedadmm", f"algorithm.rho={rho}", f"eta_l={1 / (L + rho)}",
                f"local_epochs={steps}", *overrides)
    return fed, advance(fed, initial_state(fed), rounds), rho


def test_local_init_with_participation_step_converges_to_the_optimum():
    """(a) the fixed point is the KKT point grad F = 0, sum_i y_i = 0, reached to the float64 floor: linear
    (about 3.5 decades per 100 rounds here); inexact local solves keep the fixed point."""
    fed, state, _ = _convex_run(400, 0.25, 10, "algorithm.local_init=local", "algorithm.server_step=participation")
    start = float(_grad_F(fed, fed.x0).norm())
    assert float(_grad_F(fed, state.server["x"]).norm()) <= 1e-12 * start
    assert float(sum(state.tables["y"].rows.values()).norm()) <= 1e-12 * start


def test_global_init_converges_to_the_predicted_biased_point():
    """(b) grad F(theta) + (rho S / (2 eta)) (theta - theta^0) = 0: pulled towards theta^0 (exact local solves)."""
    eta = 1.0
    fed, state, rho = _convex_run(40, 2.0, 30, "algorithm.local_init=global", f"eta_g={eta}")
    x, x0 = state.server["x"], fed.x0
    grad = _grad_F(fed, x)
    assert float((grad + rho * 4 / (2 * eta) * (x - x0)).norm()) < 1e-9 * float(grad.norm())
    assert float(grad.norm()) > 1.0


def test_fedavg_with_many_local_steps_stalls():
    """(d) client drift: 30 local GD steps per round leave FedAvg far from grad F = 0."""
    L = max_curvature(build(*CONVEX, "algorithm=fedadmm"))
    fed = build(*CONVEX[:-2], "algorithm=fedavg", f"eta_l={1 / L}", "local_epochs=30")
    x = advance(fed, initial_state(fed), 15).server["x"]
    assert float(_grad_F(fed, x).norm()) > 1.0


# -- FedADMM for the low-rank problem (LoSAC App. E, losac.md §3.6) ------------------------------

LOWRANK = ["experiment=losac/lowrank_fedadmm", "dataset.dim=6", "dataset.rank=2", "dataset.num_users=6",
           "dataset.samples_per_user=20", "dataset.test_samples=10", "clients_per_round=2", "rounds=3",
           "engine.dtype=float64", "eta_l=0.01"]


def test_server_prox_gradient_steps_solve_eq_82():
    """Many small proximal-gradient steps (81) reach eq. (82)'s closed form prox_{lam/(N rho)}(sum W / (N rho))."""
    fed = build(*LOWRANK, "algorithm.z_steps=3000", "algorithm.z_lr=0.01", "algorithm.lam=1.0")
    exact = build(*LOWRANK, "algorithm.exact_z=true", "algorithm.lam=1.0").algorithm
    exact.init(fed.x0)
    W = torch.randn(6, 36, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    Z = fed.algorithm._solve_z(torch.zeros(36, dtype=torch.float64), W)
    Z_exact = exact._solve_z(None, W)
    assert torch.allclose(Z, Z_exact, atol=1e-10)
    assert int((torch.linalg.svdvals(Z_exact.reshape(6, 6)) > 1e-12).sum()) < 6  # the threshold bites


def test_lowrank_fedadmm_keeps_the_last_uploads_of_absent_clients():
    fed = build(*LOWRANK, "algorithm.grad_scale=one")
    state = initial_state(fed)
    seen = {}
    for r in range(3):
        cohort = sample_cohort(fed.seed, r, 6, 2).tolist()
        run_round(fed, state)
        state.round += 1
        W = state.server["W"]
        for i in cohort:  # W_i = pi_i + rho X_i of the client's persistent state
            assert torch.allclose(W[i], state.tables["pi"].rows[i] + 5.0 * state.tables["X"].rows[i])
            seen[i] = W[i].clone()
        for i, w in seen.items():
            if i not in cohort:
                assert torch.equal(W[i], w)
    assert run_round(fed, state) == (2 * 36, 2 * 36)


# -- Figs. 6 and 9: step schedules of rho and eta ---------------------------------------------------

def test_rho_schedule_switches_rho_for_the_whole_round_from_round_R():
    """[R, rho2] = rho for rounds 0..R-1, then rho2 in the local gradients, the dual step and the
    message (A16), with the duals kept: the same as changing rho by hand after R rounds."""
    scheduled = final_x(*LSTSQ, "algorithm=fedadmm", "algorithm.rho=0.05", "algorithm.rho_schedule=[2,0.4]", rounds=4)
    by_hand = build(*LSTSQ, "algorithm=fedadmm", "algorithm.rho=0.05")
    state = advance(by_hand, initial_state(by_hand), 2)
    by_hand.algorithm.rho = 0.4
    assert torch.equal(scheduled, advance(by_hand, state, 2).server["x"])
    assert not torch.equal(scheduled, final_x(*LSTSQ, "algorithm=fedadmm", "algorithm.rho=0.05", rounds=4))
    assert torch.equal(final_x(*LSTSQ, "algorithm=fedadmm", "algorithm.rho_schedule=[0,0.4]"),
                       final_x(*LSTSQ, "algorithm=fedadmm", "algorithm.rho=0.4"))


def test_eta_schedule_switches_the_server_step_from_round_R():
    import dataclasses

    scheduled = final_x(*LSTSQ, "algorithm=fedadmm", "eta_g=1.0", "algorithm.eta_schedule=[3,0.5]", rounds=5)
    by_hand = build(*LSTSQ, "algorithm=fedadmm", "eta_g=1.0")
    state = advance(by_hand, initial_state(by_hand), 3)
    by_hand.algorithm.setting = dataclasses.replace(by_hand.algorithm.setting, eta_g=0.5)
    assert torch.equal(scheduled, advance(by_hand, state, 2).server["x"])
    assert not torch.equal(scheduled, final_x(*LSTSQ, "algorithm=fedadmm", "eta_g=1.0", rounds=5))


@pytest.mark.parametrize("override,match", [
    ("algorithm.rho_schedule=[60]", "rho_schedule must be null or \\[round, value\\]"),
    ("algorithm.rho_schedule=[-1,0.1]", "rho_schedule"),
    ("algorithm.eta_schedule=[60,-0.5]", "eta_schedule"),
    ("algorithm.eta_schedule=[1.5,0.5]", "eta_schedule"),
])
def test_bad_schedules_are_config_errors(override, match):
    with pytest.raises(ConfigError, match=match):
        build(*LSTSQ, "algorithm=fedadmm", override)
    with pytest.raises(ConfigError, match="server_step"):
        build(*LSTSQ, "algorithm=fedadmm", "algorithm.eta_schedule=[2,0.5]", "algorithm.server_step=participation")


# -- as released (issue 36, fedadmm.md §2.2): the round's clients chained ----------------------------

def _chained_by_hand(fed, rounds, rho, lr, momentum, E, eta):
    """FedADMM as its authors released it (commit d9c043c), written out in numpy float64 on the clients'
    least-squares losses f_i(w) = mean_j (<a_j, w> + b - y_j)^2, full local batches: one model walks through
    the round's clients in cohort order (the first from theta); client k runs E_k epochs of SGD with momentum
    (fresh buffer) on f_k + <y_k, w - theta> + rho/2 ||w - theta||^2, takes y_k += rho (w_k - theta) and sends
    (w_k - w_prev) + (y_k_new - y_k_old) / rho, w_prev the model it started from; theta += eta * mean."""
    import numpy as np

    from tests.problems import client_data

    data = [tuple(t.numpy() for t in client_data(fed, i)) for i in range(fed.clients.num_clients)]
    theta, duals, ran = fed.x0.numpy().copy(), {}, []
    for r in range(rounds):
        ids = sample_cohort(fed.seed, r, fed.clients.num_clients, fed.clients_per_round).tolist()
        epochs = (uniform(fed.seed, r, torch.tensor(ids), TAG_ALGO, 12) * E).floor().long() + 1  # FedADMM's E_i
        w, messages = theta.copy(), []
        for i, e in zip(ids, epochs.tolist()):
            ran.append(e)
            A, b = data[i]
            w_prev, y_old, buf = w.copy(), duals.get(i, np.zeros_like(theta)), None
            for _ in range(e):
                g = 2.0 * A.T @ (A @ w - b) / len(b) + y_old + rho * (w - theta)
                buf = g if buf is None else momentum * buf + g
                w = w - lr * buf
            duals[i] = y_old + rho * (w - theta)
            messages.append((w - w_prev) + (duals[i] - y_old) / rho)
        theta = theta + eta * np.mean(messages, axis=0)
    return torch.from_numpy(theta), ran


CHAINED = [*LEAST_SQUARES, "num_clients=3", "dataset.num_users=3", "clients_per_round=3", "batch_size=0", "local_epochs=4", "eta_l=0.02",
           "algorithm=fedadmm", "algorithm.rho=0.3", "local_momentum=0.5", "eta_g=0.8"]


def test_chained_fedadmm_is_the_released_code_round_by_round():
    fed = build(*CHAINED, "algorithm.chained=true")
    x = advance(fed, initial_state(fed), 2).server["x"]
    theta, ran = _chained_by_hand(fed, 2, rho=0.3, lr=0.02, momentum=0.5, E=4, eta=0.8)
    assert torch.allclose(x, theta, rtol=0, atol=1e-12)
    assert len(set(ran)) > 1  # unequal E_i
    parallel = final_x(*CHAINED, rounds=2)  # the default trains every client from theta
    assert float((parallel - x).norm()) > 1e-3 * float(x.norm())


def test_chained_fedadmm_trains_alike_as_lanes_of_a_grid_and_counts_its_floats():
    """Two step sizes trained as lanes of one program (the batched launcher) give what each gives alone;
    a client receives theta and the model it starts from (2d), uploads one message (d)."""
    from fedbench.engine.loop import run_lanes

    feds = [build(*CHAINED, "algorithm.chained=true", "num_clients=8", "dataset.num_users=8", f"eta_l={lr}", "rounds=3") for lr in (0.02, 0.05)]
    states = [initial_state(f) for f in feds]
    run_lanes(feds, states, None, lambda k, st, exc: pytest.fail(str(exc)))
    for lr, state in zip((0.02, 0.05), states):
        alone = final_x(*CHAINED, "algorithm.chained=true", "num_clients=8", "dataset.num_users=8", f"eta_l={lr}", rounds=3)
        assert torch.allclose(state.server["x"], alone, rtol=0, atol=1e-12)
    fed = build(*CHAINED, "algorithm.chained=true")
    assert run_round(fed, initial_state(fed)) == (3 * 2 * fed.flat.dim, 3 * fed.flat.dim)
    with pytest.raises(ConfigError, match="chained"):
        build(*CHAINED, "algorithm.chained=true", "algorithm.local_init=local")
