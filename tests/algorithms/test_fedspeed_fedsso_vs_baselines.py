"""FedSpeed and FedSSO against the baselines: FedSpeed without perturbation is FedDyn, FedProx keeps
the client-drift bias FedSpeed removes, and FedSSO's quasi-Newton step beats FedAdagrad's diagonal
scaling on a quadratic."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_cfg
from fedbench.runs.build import build_federation
from fedbench.engine.loop import run

LSTSQ = ["dataset=lstsq", "dataset.dim=5", "partition=natural", "num_clients=8", "model=linear",
         "engine.dtype=float64", "batch_size=0", "local_epochs=null", "local_steps=5", "eval_every=0",
         "eta_l=0.05"]


def _run(*overrides):
    fed, _ = build_federation(make_cfg(*overrides))
    return fed, run(fed).server["x"]


def _x_star(fed):
    A = torch.cat([fed.dataset.x_train, torch.ones(len(fed.dataset.x_train), 1, dtype=torch.float64)], 1)
    return torch.linalg.lstsq(A, fed.dataset.y_train[:, None]).solution[:, 0]


DIGITS = ["model=mclr", "engine.dtype=float64", "num_clients=6", "local_epochs=null", "local_steps=4",
          "batch_size=16", "eval_every=0"]


@pytest.mark.parametrize("setting", [LSTSQ, DIGITS], ids=["lstsq", "digits_minibatch"])
def test_fedspeed_without_perturbation_is_feddyn(setting):
    common = [*setting, "clients_per_round=3", "rounds=4"]
    _, x_speed = _run(*common, "algorithm=fedspeed", "algorithm.rho0=0", "algorithm.mu=0.3",
                      "algorithm.weight_decay=0", "algorithm.grad_clip=0")
    _, x_dyn = _run(*common, "algorithm=feddyn", "algorithm.alpha=0.3")
    assert torch.allclose(x_speed, x_dyn, rtol=1e-12, atol=1e-12)


def test_fedprox_stays_biased_where_fedspeed_converges():
    fed, x_speed = _run(*LSTSQ, "clients_per_round=8", "rounds=150", "algorithm=fedspeed", "algorithm.rho0=0",
                        "algorithm.mu=3", "algorithm.weight_decay=0", "algorithm.grad_clip=0")
    _, x_prox = _run(*LSTSQ, "clients_per_round=8", "rounds=150", "algorithm=fedprox", "algorithm.mu=3")
    x_star = _x_star(fed)
    scale = float(x_star.norm())
    assert float((x_speed - x_star).norm()) < 1e-9 * scale
    assert float((x_prox - x_star).norm()) > 0.05 * scale


def test_fedsso_beats_fedadagrad_on_a_quadratic():
    """tau = 1, full batch: g_k is the exact gradient and FedSSO is BFGS, which solves a d = 6
    quadratic to machine precision in 15 rounds; FedAdagrad's diagonal scaling (best of
    a small server-lr grid) does not."""
    common = [*LSTSQ, "clients_per_round=8", "local_steps=1", "rounds=15"]
    fed, x_sso = _run(*common, "algorithm=fedsso", "eta_g=1")
    x_star = _x_star(fed)
    scale = float(x_star.norm())
    assert float((x_sso - x_star).norm()) < 1e-8 * scale
    best = min(float((_run(*common, "algorithm=fedavg/adagrad", f"eta_g={lr}")[1] - x_star).norm()) for lr in (0.03, 0.1, 0.3))
    assert best > 1e-3 * scale
