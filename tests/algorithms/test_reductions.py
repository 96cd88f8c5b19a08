"""Reductions at special parameter values: an algorithm with a parameter switched off is another
algorithm, bit for bit or to rounding (FedProx mu = 0, FedAvgM momentum 0, FedCM alpha = 1, SCAFFOLD's
first round are FedAvg; DSGD is FedAvg with one step and FedSGD on full batches; MimeSVRG on one
client is gradient descent; FedSpeed without perturbation is FedDyn)."""

from __future__ import annotations

import pytest
import torch

from tests.problems import FULL_BATCH, LEAST_SQUARES, LSTSQ, STOCHASTIC, train

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


# FedSpeed's own test (test_fedspeed.py) holds it against FedDyn written out by hand; this one against
# the FedDyn implementation, on full batches and on minibatches of a classification task
SPEED_LSTSQ = [*LEAST_SQUARES, "dataset.dim=5", *FULL_BATCH, "eta_l=0.05"]
DIGITS = ["model=mclr", "engine.dtype=float64", "num_clients=6", "local_epochs=null", "local_steps=4",
          "batch_size=16", "eval_every=0"]


def _final_x(*overrides):
    return train(*overrides)[1].server["x"]


@pytest.mark.parametrize("setting", [SPEED_LSTSQ, DIGITS], ids=["lstsq", "digits_minibatch"])
def test_fedspeed_without_perturbation_is_feddyn(setting):
    common = [*setting, "clients_per_round=3", "rounds=4"]
    x_speed = _final_x(*common, "algorithm=fedspeed", "algorithm.rho0=0", "algorithm.mu=0.3",
                       "weight_decay=0", "grad_clip=0")
    x_dyn = _final_x(*common, "algorithm=feddyn", "algorithm.alpha=0.3")
    assert torch.allclose(x_speed, x_dyn, rtol=1e-12, atol=1e-12)
