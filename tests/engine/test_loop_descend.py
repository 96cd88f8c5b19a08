"""The loop executor's in-place SGD step (LocalWork.descend): plain local SGD takes it, each
parameter's gradient applied to its slice of X as torch.optim.SGD does, and the rounds equal the
gradient-then-step path's (work.grad, sgd_step, masked) bit for bit."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.conftest import build
from tests.engine.test_unequal_work import UNEQUAL
from fedbench.engine.loop import run

CNN = ["dataset=digits", "model=cnn", "num_clients=5", "clients_per_round=3", "batch_size=7", "local_steps=3",
       "local_epochs=null", "eta_l=0.05", "rounds=2", "engine.dtype=float64", "eval_every=0"]


def _without_descend(fed):
    """The same federation whose gradient oracle offers no in-place step."""
    grad_fn = fed.clients.grad_fn
    return dataclasses.replace(fed, clients=dataclasses.replace(fed.clients, grad_fn=lambda *a: grad_fn(*a)))


@pytest.mark.parametrize("problem,chunk", [(CNN, None), (UNEQUAL, 6), (UNEQUAL, None)])
@pytest.mark.parametrize("skip_done", [True, False])
def test_in_place_steps_equal_gradient_then_step(problem, chunk, skip_done):
    """Chunks of one client (the default) and of six clients of unequal work, the finished ones
    skipped (a batch of the working rows) or computed and discarded (a row per client)."""
    fed = build(*problem, "algorithm=fedavg", "engine.executor=loop")
    fed.clients.skip_done = skip_done
    if chunk:
        fed = dataclasses.replace(fed, client_chunk=chunk)
    calls = []
    descend = fed.clients.grad_fn.descend

    def counted(X, pairs, *args):
        calls.append(len(pairs))
        descend(X, pairs, *args)

    fed.clients.grad_fn.descend = counted
    try:
        got = run(fed)
    finally:
        fed.clients.grad_fn.descend = descend
    assert calls  # the in-place step was taken
    want = run(_without_descend(fed))
    assert not torch.equal(want.server["x"], fed.x0)
    assert torch.equal(got.server["x"], want.server["x"])


def test_algorithms_with_a_direction_take_the_gradient():
    """FedProx's proximal direction needs G: no in-place step."""
    fed = build(*CNN, "algorithm=fedprox", "engine.executor=loop")

    def refuse(*args):
        raise AssertionError("FedProx took the in-place plain SGD step")

    fed.clients.grad_fn.descend = refuse
    assert not torch.equal(run(fed).server["x"], fed.x0)
