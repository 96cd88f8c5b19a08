"""Engine properties: chunk and executor invariance, determinism, reduction to centralized SGD."""

from __future__ import annotations

import torch

from conftest import make_cfg, run_history
from fedbench.engine.build import build_federation
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run_round

SMALL = ["rounds=3", "num_clients=10", "clients_per_round=5", "batch_size=16", "eval_every=1"]


def _close(h1, h2, tol=1e-6):
    assert len(h1) == len(h2)
    for a, b in zip(h1, h2):
        for k in ("test_accuracy", "test_loss"):
            assert abs(a[k] - b[k]) <= tol, (k, a[k], b[k])


def test_chunk_size_does_not_change_results():
    _close(run_history(*SMALL, "engine.client_chunk=1"), run_history(*SMALL, "engine.client_chunk=5"))


def test_chunk_invariance_with_mlp_and_local_steps():
    common = [*SMALL, "model=mlp_2nn", "local_epochs=null", "local_steps=4"]
    _close(run_history(*common, "engine.client_chunk=2"), run_history(*common, "engine.client_chunk=0"))


def test_vmap_and_loop_executors_agree():
    _close(run_history(*SMALL, "engine.executor=vmap"), run_history(*SMALL, "engine.executor=loop"), tol=1e-5)


def test_same_seed_same_metrics_and_other_seed_differs():
    a, b = run_history(*SMALL, "seed=3"), run_history(*SMALL, "seed=3")
    assert [r["test_loss"] for r in a] == [r["test_loss"] for r in b]
    c = run_history(*SMALL, "seed=4")
    assert [r["test_loss"] for r in a] != [r["test_loss"] for r in c]


def test_fedavg_one_client_one_step_is_centralized_sgd():
    cfg = make_cfg("num_clients=1", "clients_per_round=1", "local_epochs=null", "local_steps=1",
                   "batch_size=32", "eta_l=0.3", "partition=iid")
    fed, _ = build_federation(cfg)
    state = initial_state(fed)
    x0 = state.server["x"].clone()
    # the batch the engine draws for client 0 in round 0, step 0
    work = LocalWork(fed.clients, torch.tensor([0]), 0, 0.3, 32, None, 1)
    batch = work.batch(0)
    run_round(fed, state)
    # centralized SGD on the same samples with a plain nn.Module and autograd
    module = fed.flat.module
    torch.nn.utils.vector_to_parameters(x0.clone(), module.parameters())
    loss = torch.nn.functional.cross_entropy(module(batch.x[0]), batch.y[0])
    loss.backward()
    expected = x0 - 0.3 * torch.cat([p.grad.reshape(-1) for p in module.parameters()])
    assert torch.allclose(state.server["x"], expected, atol=1e-6)


def test_epochs_visit_every_sample_once_and_last_batch_is_short():
    fed, _ = build_federation(make_cfg("num_clients=4", "clients_per_round=4", "partition=iid", "batch_size=64"))
    ids = torch.arange(4)
    work = LocalWork(fed.clients, ids, 0, 0.1, 64, torch.full((4,), 2), None)
    n = fed.clients.size[ids]
    assert torch.equal(work.steps, 2 * ((n + 63) // 64))
    for i in range(4):
        seen = []
        per_epoch = int((n[i] + 63) // 64)
        for t in range(per_epoch):
            b = work.batch(t)
            w = b.w[i]
            count = int((w > 0).sum())
            assert abs(float(w.sum()) - 1.0) < 1e-6  # a minibatch mean
            seen.append(count)
        assert sum(seen) == int(n[i])


def test_unequal_local_work_is_masked():
    fed, _ = build_federation(make_cfg("num_clients=4", "clients_per_round=4", "partition=iid", "batch_size=64"))
    work = LocalWork(fed.clients, torch.arange(4), 0, 0.1, 64, None, 3).with_epochs(torch.tensor([1, 2, 1, 3]))
    spe = (fed.clients.size[:4] + 63) // 64
    assert torch.equal(work.steps, spe * torch.tensor([1, 2, 1, 3]))
    assert work.active(int(spe[0])).tolist()[0] is False
