"""Engine properties: chunk and executor invariance, determinism, reduction to centralized SGD."""

from __future__ import annotations

import torch

from tests.conftest import make_cfg, run_history
from fedbench.runs.build import build_federation
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


def test_minibatch_schedule_does_not_depend_on_its_block_size(monkeypatch):
    """A round's minibatches are planned in blocks of steps; a block of one step must give the
    same samples, weights and batch widths (epochs, short last batches, unequal work, padding)."""
    import fedbench.engine.local as local

    cfg = make_cfg("num_clients=7", "clients_per_round=7", "partition=dirichlet", "partition.alpha=0.2")
    fed, _ = build_federation(cfg)
    ids = torch.arange(7)

    def draws(**schedule):
        out = []
        for B, epochs, steps in [(8, torch.tensor([1, 2, 1, 3, 1, 2, 1]), None), (7, None, 40), (0, None, 3)]:
            work = LocalWork(fed.clients, ids, 3, 0.1, B, epochs, steps)
            out += [(work.batch_index(t), work.batch(t).w, work.batch(t).uniform) for t in range(work.max_steps + 2)]
        return out

    whole = draws()
    monkeypatch.setattr(local, "_SCHEDULE_ENTRIES", 1)
    stepwise = draws()
    assert len(whole) == len(stepwise) > 40
    for (i1, w1, u1), (i2, w2, u2) in zip(whole, stepwise):
        assert torch.equal(i1, i2) and torch.equal(w1, w2) and u1 == u2
    assert any(u for _, _, u in whole) and not all(u for _, _, u in whole)


def test_uniform_batches_take_the_mean_loss_path_with_the_same_gradient():
    cfg = make_cfg("num_clients=10", "clients_per_round=4", "partition=iid", "model=mlp_2nn")
    fed, _ = build_federation(cfg)
    work = LocalWork(fed.clients, torch.tensor([1, 4, 6, 9]), 0, 0.1, 16, None, 2)
    batch = work.batch(0)
    assert batch.uniform and torch.allclose(batch.w, torch.full_like(batch.w, 1 / 16))
    X = fed.x0.expand(4, -1).clone()
    G_mean, loss_mean = work.grad(X, batch)
    G_weighted, loss_weighted = fed.clients.grad_fn(X, batch.x, batch.y, batch.w)
    assert torch.allclose(G_mean, G_weighted, atol=1e-6) and torch.allclose(loss_mean, loss_weighted, atol=1e-6)


def test_client_chunk_choice():
    from fedbench.runs.build import client_chunk

    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert client_chunk(0, 100, 199_210, torch.float32, cpu, "loop") == 1  # the loop trains client by client
    assert client_chunk(0, 100, 199_210, torch.float32, cpu, "vmap") == 21  # 16 MiB of [s, d] float32
    assert client_chunk(0, 100, 199_210, torch.float64, cpu, "vmap") == 10
    assert client_chunk(0, 100, 7_850, torch.float32, cpu, "vmap") == 100
    assert client_chunk(0, 100, 199_210, torch.float32, gpu, "vmap") == 100
    assert client_chunk(7, 100, 199_210, torch.float32, gpu, "vmap") == 7
    assert client_chunk(500, 100, 10, torch.float32, cpu, "vmap") == 100
    # on an accelerator a measured client (activations) caps the chunk at 35% of the free memory
    assert client_chunk(0, 200, 11_000_000, torch.float32, gpu, "vmap", 2**30, 40 * 2**30) == 14
    assert client_chunk(0, 10, 11_000_000, torch.float32, gpu, "vmap", 2**30, 40 * 2**30) == 10
    assert client_chunk(0, 200, 11_000_000, torch.float32, gpu, "vmap", 2**30, 2**30) == 1
    assert client_chunk(3, 200, 11_000_000, torch.float32, gpu, "vmap", 2**30, 40 * 2**30) == 3  # asked for


def test_client_tables_checkpoint_their_rows_without_a_stacked_copy_and_load_the_stacked_layout_too():
    from fedbench.core.types import ClientStateSpec
    from fedbench.engine.client_state import ClientStateTable

    table = ClientStateTable(ClientStateSpec((3,), 0.0), torch.device("cpu"))
    table.scatter([4, 1], torch.tensor([[1.0, 2, 3], [4, 5, 6]]))
    saved = table.state_dict()
    assert saved["values"][0].data_ptr() == table.rows[1].data_ptr()  # the row itself, no copy of the table
    for layout in (saved, {"ids": saved["ids"], "values": torch.stack(saved["values"])}):  # stacked: older checkpoints
        again = ClientStateTable(ClientStateSpec((3,), 0.0), torch.device("cpu"))
        again.load_state_dict(layout)
        assert torch.equal(again.gather([1, 4, 0], torch.device("cpu")), torch.tensor([[4.0, 5, 6], [1, 2, 3], [0, 0, 0]]))
