"""Unequal local work (issue 20): the default chunking groups clients of similar step counts and a
step computes only the clients still working (that every algorithm then equals the research loop,
one client at a time, is tests/algorithms/test_contract.py's vmap = loop check)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import build
from tests.problems import LSTSQ
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import run, work_groups

# sizes grow with the client id and the aggregation weighs by them: chunks out of cohort order
# must be put back in it; chunks of at most 6 of the 8 clients: a batched chunk, a loop one. Client k holds 6 * 1.6**k samples (6 .. 161) in batches of 3: 2 to 54 local steps per epoch
UNEQUAL = [
    *LSTSQ, "dataset.samples_per_user=6", "dataset.size_growth=1.6", "clients_per_round=8", "engine.client_chunk=6",
    "local_steps=null", "local_epochs=1", "batch_size=3", "rounds=3", "eta_l=0.01", "aggregation=num_samples",
]


def test_padded_chunks_agree_with_grouped_skipping_ones():
    """The old way (one chunk, every client computing every step, the mask discarding the extra
    ones) and the new give the same model: skipping drops only discarded work."""
    new = run(build(*UNEQUAL, "algorithm=scaffold"))
    fed_old = build(*UNEQUAL, "algorithm=scaffold")
    fed_old.clients.skip_done, fed_old.group_by_work = False, False
    old = run(fed_old)
    assert torch.allclose(old.server["x"], new.server["x"], rtol=0, atol=1e-10)


def test_work_groups():
    # equal work: the cohort's order in consecutive chunks, as before grouping existed
    assert work_groups([5] * 7, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    # most steps first; a chunk closes below 1/spread of its first client's steps or at max_chunk
    steps = [6, 74, 43, 1, 37, 44, 4, 10, 14, 29]
    assert work_groups(steps, 10) == [[1], [5, 2, 4], [9], [8], [7], [0], [6], [3]]  # spread 1.25 (the default)
    assert work_groups(steps, 10, spread=2) == [[1, 5, 2, 4], [9], [8, 7], [0, 6], [3]]
    assert work_groups(steps, 2, spread=2) == [[1, 5], [2, 4], [9], [8, 7], [0, 6], [3]]
    # a leftover too small to batch joins the chunk before it when that one becomes batchable and at
    # most half idle; not when it would exceed max_chunk
    near = [35, 34, 33, 32, 31, 30, 29, 28, 27, 27]
    assert work_groups(near, 10, spread=1.25, min_rows=5) == [list(range(10))]
    assert work_groups(near, 8, spread=1.25, min_rows=5) == [list(range(8)), [8, 9]]
    assert work_groups([40, 40, 40, 40, 10, 10], 10, min_rows=5) == [[0, 1, 2, 3], [4, 5]]
    assert work_groups([6, 74, 43, 1], 3, spread=float("inf")) == [[0, 1, 2], [3]]
    groups = work_groups([3, 1, 2, 8, 8, 5], 1)
    assert sorted(i for g in groups for i in g) == list(range(6)) and all(len(g) == 1 for g in groups)


def test_a_step_computes_only_the_working_clients():
    fed = build(*UNEQUAL)
    ids = torch.arange(6)
    work = LocalWork(fed.clients, ids, 0, 0.1, 3, torch.ones(6, dtype=torch.long), None)
    steps = work.steps.tolist()
    assert work.batch(sorted(steps)[0]).rows is None  # one of six done: all rows computed, the mask discards
    t = sorted(steps)[2]  # the three clients with the fewest steps are done
    batch = work.batch(t)
    working = [i for i in range(6) if steps[i] > t]
    assert batch.rows.tolist() == working and batch.x.shape[0] == len(working)
    X = fed.x0.expand(6, -1).clone()
    G, loss = work.grad(X, batch)
    done = [i for i in range(6) if i not in working]
    assert torch.equal(G[done], torch.zeros_like(G[done])) and G[working].abs().sum(1).min() > 0
    fed.clients.skip_done = False
    full = LocalWork(fed.clients, ids, 0, 0.1, 3, torch.ones(6, dtype=torch.long), None)
    G_full, _ = full.grad(X, full.batch(t))
    assert full.batch(t).rows is None
    assert torch.allclose(G_full[working], G[working], rtol=0, atol=1e-12)


def test_auto_hands_few_rows_to_the_loop_and_composes_with_torch_func():
    """`auto` on a CPU: vmap for five or more rows, the loop below (the same gradients); under a
    torch.func transform (FedNL's Hessians) always vmap, which composes."""
    from fedbench.engine import gradients

    fed = build("dataset=digits", "model=mlp_2nn", "partition=iid")
    hybrid = gradients.make_grad_fn(fed.flat, "classification", "vmap", loop_below=gradients.LOOP_BELOW)
    paths = {e: gradients.make_grad_fn(fed.flat, "classification", e) for e in ("vmap", "loop")}
    x, y = fed.clients.x, fed.clients.y
    torch.manual_seed(0)
    for s, path in ((2, "loop"), (4, "loop"), (5, "vmap"), (8, "vmap")):
        X = fed.x0.expand(s, -1) + 0.01 * torch.randn(s, fed.x0.numel())
        xb, yb = x[: s * 4].view(s, 4, *x.shape[1:]), y[: s * 4].view(s, 4)
        G_h, _ = hybrid(X, xb, yb, None)
        assert torch.equal(G_h, paths[path](X, xb, yb, None)[0]), (s, path)  # bit for bit: that path ran
        other = paths["vmap" if path == "loop" else "loop"](X, xb, yb, None)[0]
        assert torch.allclose(G_h, other, atol=1e-5)
    X = fed.x0.expand(2, -1).clone()
    xb, yb = x[:8].view(2, 4, *x.shape[1:]), y[:8].view(2, 4)
    _, tangent = torch.func.jvp(lambda Z: hybrid(Z, xb, yb, None)[0], (X,), (torch.ones_like(X),))
    assert torch.isfinite(tangent).all()


def test_small_models_tolerate_more_idle_rows():
    from fedbench.engine.loop import work_spread

    assert work_spread(7_850) > 4 > 1.5 > work_spread(199_210) > 1.25 < work_spread(10**9) < 1.26


def test_chunks_group_the_clients_by_the_work_the_algorithm_gives_them(monkeypatch):
    """FedADMM's and FedProx's system heterogeneity draws each client's E_i inside the method: the engine groups
    chunks by those draws (Algorithm.work_of), not by the configured E, which gave every client the same count and
    left a chunk computing and masking its finished clients' rows (fedadmm/fig6 ci: 24% of its training time)."""
    import fedbench.engine.loop as loop
    from fedbench.algorithms.fedadmm import FedADMM

    hetero = [*UNEQUAL, "dataset.size_growth=1.0", "dataset.samples_per_user=12", "local_epochs=4",
              "algorithm=fedadmm", "algorithm.hetero_epochs=true", "rounds=2"]
    grouped_by, taken = [], {}
    work_groups_of = loop.work_groups

    def recording_groups(steps, *args, **kwargs):
        grouped_by.append(list(steps))
        return work_groups_of(steps, *args, **kwargs)

    update = FedADMM.client_update

    def recording_update(self, down, client, work):
        own = self.work_of(work)
        taken.update(zip(work.ids.tolist(), own.steps.tolist()))
        return update(self, down, client, work)

    monkeypatch.setattr(loop, "work_groups", recording_groups)
    monkeypatch.setattr(FedADMM, "client_update", recording_update)
    fed = build(*hetero)
    cohort = loop.sample_cohort(fed.seed, 1, fed.clients.num_clients, fed.clients_per_round).tolist()
    grouped = run(fed)
    assert [taken[i] for i in cohort] == grouped_by[-1]  # round 2's: each client's own draw, in cohort order
    assert len(set(grouped_by[-1])) > 1 and set(grouped_by[-1]) <= {4, 8, 12, 16}  # E_i in {1..4}, 4 steps an epoch

    monkeypatch.setattr(loop, "work_groups", work_groups_of)
    fed_ungrouped = build(*hetero)
    fed_ungrouped.group_by_work = False
    assert torch.equal(run(fed_ungrouped).server["x"], grouped.server["x"])
