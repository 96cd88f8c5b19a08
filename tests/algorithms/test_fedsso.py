"""FedSSO: the three exact quasi-Newton backends agree, the safeguarded update keeps B SPD and the
secant equation up to scale, B = I gives FedAvg with server step eta/(alpha tau), tau = 1 on one
client is deterministic safeguarded BFGS, and communication equals FedAvg's (papers/fedsso.md §2.9)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_cfg
from tests.problems import FULL_BATCH, LEAST_SQUARES, pooled_optimum, train
from fedbench.algorithms.fedsso import FedSSO
from fedbench.algorithms.quasi_newton import QuasiNewton
from fedbench.runs.build import build_federation
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import run
from fedbench.core.errors import ConfigError
from fedbench.models import build_model

LOWER, UPPER = 1e-4, 9999.0
DIGITS = ["model=mclr", "engine.dtype=float64", "num_clients=5", "clients_per_round=5", "local_epochs=null",
          "local_steps=3", "batch_size=10", "eta_l=0.01", "aggregation=num_samples", "eval_every=0"]


def _pairs(d: int, n: int, seed: int = 0):
    """Pairs of three kinds: y = A s with A SPD (accepted), y^T s < 0, and |y|^2 / y^T s < lambda;
    the last two force the curvature."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(d, d, generator=gen, dtype=torch.float64)
    A = Q @ Q.T / d + 0.1 * torch.eye(d, dtype=torch.float64)
    for j in range(n):
        s = torch.randn(d, generator=gen, dtype=torch.float64)
        yield s, (A @ s, -(A @ s), 1e-6 * (A @ s))[j % 3]


def _forced(s, y):
    ys, yy = float(y @ s), float(y @ y)
    return not (ys > 0 and LOWER < yy / ys < UPPER)


def _state(algo, d):
    return {**algo.empty_memory(torch.zeros(d, dtype=torch.float64)),
            "qn_skipped": torch.tensor(0.0), "qn_forced": torch.tensor(0.0)}


def test_backends_agree_and_B_stays_spd_with_the_secant_equation_up_to_scale():
    d, n, reset_at = 12, 36, 20
    algos = {b: QuasiNewton(backend=b) for b in ("lbfgs_exact", "dense_inverse", "dense_solve")}
    states = {b: _state(a, d) for b, a in algos.items()}
    gen = torch.Generator().manual_seed(1)
    forced = 0
    for j, (s, y) in enumerate(_pairs(d, n)):
        if j == reset_at:  # B = I
            states = {b: {**st, **algos[b].empty_memory(s)} for b, st in states.items()}
            continue
        for b, algo in algos.items():
            algo.add_pair(states[b], s, y)
        forced += _forced(s, y)
        ys, yy = y @ s, y @ y
        c = 2 * yy / (LOWER + UPPER) if _forced(s, y) else ys
        B = states["dense_solve"]["qn_matrix"]
        assert torch.allclose(B, B.T, rtol=0, atol=1e-10 * float(B.abs().max()))
        assert float(torch.linalg.eigvalsh(B).min()) > 0  # SPD
        assert torch.allclose(B @ s, (ys / c) * y, rtol=1e-9, atol=1e-9 * float(y.norm()))  # secant up to scale
        g = torch.randn(d, generator=gen, dtype=torch.float64)
        p = {b: algo.inverse_times(states[b], g, first=False) for b, algo in algos.items()}
        scale = float(p["dense_solve"].norm())
        for b in ("lbfgs_exact", "dense_inverse"):
            assert float((p[b] - p["dense_solve"]).norm()) <= 1e-9 * scale, (j, b)
    assert 0 < forced < n - 1
    for st in states.values():
        assert float(st["qn_forced"]) == forced and float(st["qn_skipped"]) == 0
    assert states["lbfgs_exact"]["qn_s"].shape[0] == n - reset_at - 1


def test_degenerate_pair_is_skipped_and_counted():
    algo = QuasiNewton()
    st = _state(algo, 3)
    s = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    algo.add_pair(st, s, torch.tensor([0.0, 2.0, 0.0], dtype=torch.float64))  # y^T s = 0
    algo.add_pair(st, torch.zeros(3, dtype=torch.float64), s)  # s = 0
    assert float(st["qn_skipped"]) == 2 and st["qn_s"].shape[0] == 0
    limited = QuasiNewton(history_size=2)
    st = _state(limited, 12)
    for s, y in _pairs(12, 6):
        limited.add_pair(st, s, y)
    assert st["qn_s"].shape[0] == 2


def test_backends_give_the_same_run():
    xs = [run(build_federation(make_cfg(*DIGITS, "rounds=6", "algorithm=fedsso", f"algorithm.backend={b}"))[0])
          for b in ("lbfgs_exact", "dense_inverse", "dense_solve")]
    x0 = xs[0].server["x"]
    assert float(xs[0].history[-1]["qn_pairs"]) == 5  # round 1 has no pair
    for st in xs[1:]:
        assert torch.allclose(st.server["x"], x0, rtol=1e-9, atol=1e-9 * float(x0.abs().max()))


@pytest.mark.parametrize("eta", [0.5, 0.03])  # 0.03 = alpha tau: FedAvg itself
def test_identity_B_is_fedavg_with_server_step_eta_over_alpha_tau(eta):
    alpha_tau = 0.01 * 3
    sso = run(build_federation(make_cfg(*DIGITS, "rounds=4", "algorithm=fedsso", "algorithm.reset_period=1",
                                        f"eta_g={eta}"))[0])
    avg = run(build_federation(make_cfg(*DIGITS, "rounds=4", "algorithm=fedavg", f"eta_g={eta / alpha_tau}"))[0])
    assert torch.allclose(sso.server["x"], avg.server["x"], rtol=1e-12, atol=1e-12)
    assert sso.floats_up == avg.floats_up and sso.floats_down == avg.floats_down  # same payload


@pytest.mark.parametrize("upper", [9999.0, 3.0])  # 3.0 forces the curvature on most pairs
def test_one_client_one_full_batch_step_is_safeguarded_bfgs(upper):
    """tau = 1, N = 1, full batch: g_k = grad f(x_k), and FedSSO is deterministic BFGS with the safeguard."""
    eta, rounds = 0.5, 8
    fed, _ = build_federation(make_cfg(
        "dataset=lstsq", "dataset.num_users=1", "dataset.dim=4", "partition=natural", "num_clients=1",
        "clients_per_round=1", "model=linear", "engine.dtype=float64", "batch_size=0", "local_epochs=null",
        "local_steps=1", "eval_every=0", "eta_l=0.1", f"eta_g={eta}", f"rounds={rounds}", "algorithm=fedsso",
        f"algorithm.curvature_upper={upper}", "algorithm.backend=lbfgs_exact"))
    state = run(fed)
    x, B = fed.x0.clone(), torch.eye(fed.flat.dim, dtype=torch.float64)
    x_prev = g_prev = None
    forced = 0
    for k in range(rounds):
        work = LocalWork(fed.clients, torch.tensor([0]), k, 0.1, 0, None, 1)
        g = work.grad(x[None], work.batch(0))[0][0]
        if g_prev is not None:
            s, y = x - x_prev, g - g_prev
            c = y @ s
            if not (c > 0 and LOWER < (y @ y) / c < upper):
                c, forced = 2 * (y @ y) / (LOWER + upper), forced + 1
            B = B + torch.outer(y, y) / c - torch.outer(B @ s, B @ s) / (s @ B @ s)
        x_prev, g_prev = x, g
        x = x - eta * torch.linalg.solve(B, g)
    assert torch.allclose(state.server["x"], x, rtol=1e-9, atol=1e-12)
    assert state.history[-1]["qn_forced"] == forced
    if upper < 10:
        assert forced > 0


def test_communication_is_fedavgs_and_paper_bytes_per_round():
    sso = run(build_federation(make_cfg(*DIGITS, "rounds=2", "algorithm=fedsso"))[0])
    avg = run(build_federation(make_cfg(*DIGITS, "rounds=2", "algorithm=fedavg"))[0])
    d = build_model("mclr", (1, 8, 8), 10).dim
    assert [h["floats_up"] for h in sso.history] == [h["floats_up"] for h in avg.history] == [5 * d, 10 * d]
    assert [h["floats_down"] for h in sso.history] == [h["floats_down"] for h in avg.history]
    # paper Table 1: n_c = 2 x 4 x d bytes (one float32 model down and up) = 62,800 B for MCLR 784 -> 10
    assert 2 * 4 * build_model("mclr", (1, 28, 28), 10).dim == 62_800


@pytest.mark.parametrize("override", ["algorithm.backend=bfgs", "algorithm.curvature_lower=1e5",
                                      "algorithm.reset_period=-1", "algorithm.history_size=0",
                                      "algorithm.gradient_scale=tau", "algorithm.first_round=zero",
                                      "algorithm.backend=dense_solve algorithm.history_size=5"])
def test_bad_values_are_config_errors(override):
    with pytest.raises(ConfigError):
        build_federation(make_cfg("algorithm=fedsso", *override.split()))


def test_a_dense_matrix_beyond_the_memory_available_is_refused_at_the_build(monkeypatch):
    """cnn on digits has d = 188,810: a dense d x d float64 matrix is 285 GB (four in an update), allocated at round 1
    before this check; lbfgs_exact keeps d-vector pairs and is built."""
    import fedbench.core.memory as memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: 10**10)
    with pytest.raises(ConfigError, match=r"^algorithm.backend=dense_inverse keeps a dense d x d float64 matrix, d = "
                                          r"188,810 parameters: its update holds 4 at once, 1.1 TB, and cpu has 10.0 GB "
                                          r"available; use algorithm.backend=lbfgs_exact, which keeps d-vector pairs"):
        build_federation(make_cfg("algorithm=fedsso", "algorithm.backend=dense_inverse", "model=cnn"))
    build_federation(make_cfg("algorithm=fedsso", "model=cnn"))
    build_federation(make_cfg("algorithm=fedsso", "algorithm.backend=dense_inverse"))  # mclr: d = 650, 13.5 MB


def test_reference_v1_first_step_is_null_from_a_zero_model():
    """Spec §2.4: the v1 code's x_0 = g_0 = 0 with a zero-initialised MCLR gives s = 0 and
    D_1 = I - g g^T / |g|^2, so the first step is exactly zero."""
    fed, _ = build_federation(make_cfg(*DIGITS, "rounds=1", "algorithm=fedsso/ref_v1"))
    fed.x0 = torch.zeros_like(fed.x0)
    x1 = run(fed).server["x"]
    assert float(x1.abs().max()) < 1e-12
    fed, _ = build_federation(make_cfg(*DIGITS, "rounds=1", "algorithm=fedsso"))
    fed.x0 = torch.zeros_like(fed.x0)
    assert float(run(fed).server["x"].abs().max()) > 1e-3  # the paper formula moves


def test_reference_v2_first_step_is_lbfgs_scaled():
    """torch.optim.LBFGS's first step: x_1 = x_0 - eta min(1, 1/|g|_1) g with g = (x_0 - v)/alpha."""
    eta = 0.7
    v = run(build_federation(make_cfg(*DIGITS, "rounds=1", "algorithm=fedavg"))[0]).server["x"]
    fed, _ = build_federation(make_cfg(*DIGITS, "rounds=1", "algorithm=fedsso/ref_v2", f"eta_g={eta}"))
    x0 = fed.x0.clone()
    g = (x0 - v) / 0.01
    expected = x0 - eta * min(1.0, 1.0 / float(g.abs().sum())) * g
    assert torch.allclose(run(fed).server["x"], expected, rtol=1e-10, atol=1e-12)


def test_fedsso_beats_fedadagrad_on_a_quadratic():
    """tau = 1, full batch: g_k is the exact gradient and FedSSO is BFGS, which solves a d = 6
    quadratic to machine precision in 15 rounds; FedAdagrad's diagonal scaling (best of
    a small server-lr grid) does not."""
    common = [*LEAST_SQUARES, "dataset.dim=5", *FULL_BATCH, "eta_l=0.05", "clients_per_round=8", "local_steps=1",
              "rounds=15"]
    fed, sso = train(*common, "algorithm=fedsso", "eta_g=1")
    x_star = pooled_optimum(fed)
    scale = float(x_star.norm())
    assert float((sso.server["x"] - x_star).norm()) <= 1e-12 * scale  # machine precision: the float64 floor
    best = min(float((train(*common, "algorithm=fedavg/adagrad", f"eta_g={lr}")[1].server["x"] - x_star).norm())
               for lr in (0.03, 0.1, 0.3))
    assert best > 1e-3 * scale
