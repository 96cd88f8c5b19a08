"""LoSAC, LoSAC-Prox and FedSaga (losac.md §8 targets 1-4): invariants of the phi/table scales,
reductions (FedSaga M=1 = FedAvg, LoSAC N=S=1 = SAGA, prox closed forms), exact convergence on
heterogeneous least squares where FedAvg stalls, and the documented failure modes of `paper`."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import advance, build
from tests.problems import LEAST_SQUARES, global_grad
from fedbench.algorithms import load_all
from fedbench.algorithms.losac import draw_blocks
from fedbench.algorithms.prox import Regularizer, singular_value_threshold, soft_threshold
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run_round
from fedbench.core.errors import ConfigError

LSTSQ = [*LEAST_SQUARES, "batch_size=0", "local_epochs=null"]
# target 3's problem: n_i = 40, unit noise, heterogeneous feature shifts and optima
HETERO = [*LSTSQ, "dataset.samples_per_user=40", "dataset.noise=1.0", "dataset.dim=4", "local_steps=5"]


def max_block_curvature(fed, M):
    """L_max: the largest curvature of a scaled block gradient g_{i,j} = M grad f_{i,j} (mean scale)."""
    index, size = fed.clients.blocks(M)
    L = 0.0
    for i in range(fed.clients.num_clients):
        for j in range(M):
            A = fed.clients.x[index[i, j, : size[i, j]]]
            A = torch.cat([A, torch.ones(len(A), 1, dtype=A.dtype)], 1)  # the bias
            L = max(L, float(2 * M / fed.clients.size[i] * torch.linalg.eigvalsh(A.T @ A)[-1]))
    return L


def table_sum(state):
    return sum(state.tables["Y"].rows.values())  # [M, d], visited clients only (others are 0)


# -- target 1: invariants ----------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["consistent", "paper"])
def test_phi_is_the_scaled_sum_of_the_tables(variant):
    N, S, M = 8, 3, 4
    fed = build(*LSTSQ, "engine.dtype=float32", f"clients_per_round={S}", "local_steps=3", "eta_l=0.01",
                "algorithm=losac", f"algorithm.variant={variant}", f"algorithm.blocks={M}")
    factor = (lambda Y: Y.sum(0) / M) if variant == "consistent" else (lambda Y: N / S * Y.sum(0))

    def check(state):
        expected = factor(table_sum(state))
        assert float((state.server["phi"] - expected).norm()) <= 1e-5 * float(expected.norm())

    state = advance(fed, initial_state(fed), 6, check)
    assert len(state.tables["Y"].rows) > S  # several cohorts, unvisited clients counted as 0


def test_communication_is_x_and_phi_both_ways():
    fed = build(*LSTSQ, "clients_per_round=3", "local_steps=2", "eta_l=0.01", "algorithm=losac")
    state = initial_state(fed)
    down, up = run_round(fed, state)
    assert down == up == 3 * 2 * fed.flat.dim
    fed = build(*LSTSQ, "clients_per_round=3", "local_steps=2", "eta_l=0.01", "algorithm=fedsaga")
    assert run_round(fed, initial_state(fed)) == (3 * fed.flat.dim, 3 * fed.flat.dim)


def test_table_is_persistent_and_holds_the_last_block_gradients():
    """After a round, a visited client's row j is g_{i,j} at the local iterate where j was last drawn;
    with one local step from x, the drawn block's row is exactly g_{i,j}(x)."""
    M = 4
    fed = build(*LSTSQ, "clients_per_round=3", "local_steps=1", "eta_l=0.01", "algorithm=losac", f"algorithm.blocks={M}")
    state = initial_state(fed)
    x = state.server["x"].clone()
    run_round(fed, state)
    ids = sorted(state.tables["Y"].rows)
    work = LocalWork(fed.clients, torch.tensor(ids), 0, 0.01, 0, None, 1)
    j = draw_blocks(work, 0, M)
    G, _ = work.grad(x.expand(len(ids), -1), work.block_batch(j, M))
    for k, i in enumerate(ids):
        Y = state.tables["Y"].rows[i]
        assert torch.allclose(Y[j[k]], G[k], atol=1e-12)
        others = [m for m in range(M) if m != int(j[k])]
        assert float(Y[others].abs().max()) == 0.0


# -- target 2: reductions ----------------------------------------------------------------------

def test_fedsaga_with_one_block_is_fedavg_full_batch():
    common = [*LSTSQ, "clients_per_round=3", "local_steps=4", "eta_l=0.02"]
    a = advance(fed := build(*common, "algorithm=fedsaga", "algorithm.blocks=1"), initial_state(fed), 5)
    b = advance(fed := build(*common, "algorithm=fedavg"), initial_state(fed), 5)
    assert torch.allclose(a.server["x"], b.server["x"], rtol=0, atol=1e-12)
    assert float((a.server["x"] - initial_state(fed).server["x"]).norm()) > 0.1


def test_losac_consistent_single_client_is_saga_over_blocks():
    M, T, R, lr = 4, 3, 4, 0.02
    fed = build(*LSTSQ, "num_clients=1", "dataset.num_users=1", "clients_per_round=1", f"local_steps={T}",
                f"eta_l={lr}", "algorithm=losac", f"algorithm.blocks={M}")
    state = advance(fed, initial_state(fed), R)
    # SAGA (Defazio et al. 2014) on f = sum_j f_j with g_j = M grad f_j: x -= lr (g_j(x) - Y[j] + mean Y)
    x = fed.x0.clone()[None]
    Y = torch.zeros(M, fed.flat.dim, dtype=x.dtype)
    for r in range(R):
        work = LocalWork(fed.clients, torch.tensor([0]), r, lr, 0, None, T)
        for t in range(T):
            j = draw_blocks(work, t, M)
            g, _ = work.grad(x, work.block_batch(j, M))
            x = x - lr * (g - Y[j] + Y.mean(0))
            Y[j] = g
    assert torch.allclose(state.server["x"], x[0], rtol=0, atol=1e-12)
    assert torch.allclose(state.tables["Y"].rows[0], Y, atol=1e-12)


@pytest.mark.skipif("scaffold" not in load_all(), reason="SCAFFOLD is on branch `baselines`")
def test_scaffold_with_zero_control_variates_is_fedavg_for_one_round():
    common = [*LSTSQ, "clients_per_round=3", "local_steps=4", "batch_size=5", "eta_l=0.02"]
    a = advance(fed := build(*common, "algorithm=scaffold"), initial_state(fed), 1)
    b = advance(fed := build(*common, "algorithm=fedavg"), initial_state(fed), 1)
    assert torch.equal(a.server["x"], b.server["x"])


def test_prox_operators_match_closed_forms():
    v = torch.tensor([-3.0, -0.5, 0.0, 0.2, 2.0], dtype=torch.float64)
    assert torch.equal(soft_threshold(v, 1.0), torch.tensor([-2.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    U, _ = torch.linalg.qr(torch.randn(2, 6, 6, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(2, 6, 6, generator=g, dtype=torch.float64))
    sigma = torch.tensor([[5.0, 3.0, 1.5, 0.9, 0.3, 0.1], [4.0, 2.0, 1.0, 0.5, 0.2, 0.0]], dtype=torch.float64)
    X = U @ torch.diag_embed(sigma) @ V.transpose(-1, -2)
    out = singular_value_threshold(X.reshape(2, 36), 1.0, (6, 6)).reshape(2, 6, 6)  # batched over clients
    assert torch.allclose(out, U @ torch.diag_embed((sigma - 1.0).clamp(min=0)) @ V.transpose(-1, -2), atol=1e-12)
    assert torch.allclose(Regularizer("nuclear", 2.0, (6, 6)).value(X.reshape(2, 36)), 2 * sigma.sum(1))


def test_nuclear_regularizer_needs_a_square_model():
    with pytest.raises(ConfigError, match="square"):
        build(*LSTSQ, "clients_per_round=3", "local_steps=1", "algorithm=losac", "algorithm.regularizer=nuclear")
    with pytest.raises(ConfigError, match="variant"):
        build(*LSTSQ, "clients_per_round=3", "local_steps=1", "algorithm=losac", "algorithm.variant=literal")


# -- target 3: exact convergence under heterogeneity ---------------------------------------------

def _run_hetero(alg, M, S, rounds, c=0.5, *extra):
    L = max_block_curvature(build(*HETERO, "clients_per_round=1", "algorithm=fedsaga", f"algorithm.blocks={M}"), M)
    fed = build(*HETERO, f"clients_per_round={S}", f"eta_l={c / L}", f"algorithm={alg}", *extra)
    grads = {}  # ||grad f|| at rounds R/2 and R

    def record(st):
        if st.round in (rounds // 2, rounds):
            grads[st.round] = float(global_grad(fed, st.server["x"]).norm())

    advance(fed, state := initial_state(fed), rounds, record)
    return list(grads.values()), fed, state


@pytest.mark.parametrize("variant,M,S,c", [("consistent", 4, 3, 0.5), ("consistent", 1, 8, 0.5), ("paper", 4, 3, 0.2)])
def test_losac_converges_exactly_under_heterogeneity(variant, M, S, c):
    """Constant step eta = c / L_max (SAGA's restriction; the paper preset's global term is M N/S larger)."""
    grads, *_ = _run_hetero("losac", M, S, 300, c, f"algorithm.variant={variant}", f"algorithm.blocks={M}")
    half, final = grads
    assert final <= 1e-12, grads  # the float64 floor
    assert final < 1e-3 * half  # still contracting linearly: not a plateau


def test_fedavg_stalls_under_heterogeneity_at_the_same_step():
    (half, final), *_ = _run_hetero("fedavg", 1, 8, 60)
    assert final > 0.1 and abs(final - half) < 0.02 * final  # settling at a biased fixed point


def test_fedsaga_local_variance_reduction_still_drifts():
    grads, *_ = _run_hetero("fedsaga", 4, 8, 60, 0.5, "algorithm.blocks=4")
    assert grads[-1] > 0.1


def test_losac_prox_l1_reaches_the_lasso_solution():
    """Composite fixed point of min f + lam ||x||_1: x = prox_{s lam}(x - s grad f(x)) for any s > 0."""
    lam = 1.0
    grads, fed, state = _run_hetero("losac", 4, 3, 200, 0.5, "algorithm.blocks=4", "algorithm.regularizer=l1", f"algorithm.lam={lam}")
    x = state.server["x"]
    residual = x - soft_threshold(x - 0.01 * global_grad(fed, x), 0.01 * lam)
    assert float(residual.norm()) <= 1e-12
    assert int((x == 0).sum()) >= 1  # the l1 term is active: some coordinates exactly zero


# -- target 4: documented failure modes of the `paper` preset -------------------------------------

def _warm_start(fed, state, kappa):
    """Tables Y_i[j] = g_{i,j}(x^0) for every client, phi^0 = kappa * sum_i sum_j Y_i[j] (SAGA's warm start)."""
    M, N = fed.algorithm.blocks, fed.clients.num_clients
    work = LocalWork(fed.clients, torch.arange(N), 0, 0.0, 0, None, 1)
    X = fed.x0.expand(N, -1)
    Y = torch.stack([work.grad(X, work.block_batch(torch.full((N,), j), M))[0] for j in range(M)], 1)
    state.tables["Y"].scatter(list(range(N)), Y)
    state.server["phi"] = kappa * Y.sum((0, 1))


def test_paper_preset_with_warm_start_converges_to_a_wrong_point():
    """With zero init the paper preset converges exactly (test above); a SAGA warm start leaves the
    offset phi - (N/S) sum Y = -(N/S - 1) phi^0 forever (eq. 13), so the limit is not stationary."""
    L = max_block_curvature(build(*HETERO, "clients_per_round=1", "algorithm=fedsaga", "algorithm.blocks=4"), 4)
    fed = build(*HETERO, "clients_per_round=3", f"eta_l={0.2 / L}", "algorithm=losac/paper", "algorithm.blocks=4")
    state = initial_state(fed)
    _warm_start(fed, state, kappa=1.0)
    phi0 = state.server["phi"].clone()
    x_before = advance(fed, state, 100).server["x"].clone()
    offset = state.server["phi"] - 8 / 3 * table_sum(state).sum(0)
    assert torch.allclose(offset, -(8 / 3 - 1) * phi0, rtol=1e-9, atol=1e-9)
    x = advance(fed, state, 10).server["x"]
    assert float((x - x_before).norm()) < 1e-6  # settled ...
    assert float(global_grad(fed, x).norm()) > 1e-2  # ... at a wrong point


def test_sum_loss_scale_is_the_mean_scale_with_a_step_n_i_times_smaller():
    """loss_scale=sum (eq. 6: f_i = sum of losses) multiplies every block gradient, Y and phi by n_i = 20."""
    common = [*LSTSQ, "clients_per_round=3", "local_steps=3", "algorithm=losac", "algorithm.blocks=4"]
    a = advance(fed := build(*common, "eta_l=0.02"), initial_state(fed), 3)
    b = advance(fed := build(*common, "eta_l=0.001", "loss_scale=sum"), initial_state(fed), 3)
    assert torch.allclose(a.server["x"], b.server["x"], rtol=0, atol=1e-12)
    assert torch.allclose(20 * a.server["phi"], b.server["phi"], rtol=1e-10, atol=1e-10)
