"""A population's cost follows the cohort (issue 35): clients made when sampled train exactly as the
same data held in memory, a round makes and touches its cohort only, and per-client state in
memory-mapped files resumes bit for bit."""

from __future__ import annotations

import dataclasses
import os
import tracemalloc

import numpy as np
import pytest
import torch

from tests.conftest import make_cfg
from fedbench.core.errors import FedbenchError
from fedbench.core.streams import sample_cohort
from fedbench.engine import client_state
from fedbench.engine.checkpoint import load_checkpoint, save_checkpoint
from fedbench.engine.client_state import DiskClientStateTable
from fedbench.engine.local import ClientData
from fedbench.engine.loop import initial_state, run_round
from fedbench.runs.build import build_federation


def _fed(n: int, algorithm: str, *extra: str):
    cfg = make_cfg("dataset=synthetic", f"dataset.num_users={n}", "dataset.generator=per_user", "partition=natural",
                   f"num_clients={n}", f"algorithm={algorithm}", "batch_size=50", *extra)
    return build_federation(cfg)[0]


def _rounds(fed, state, count: int):
    for _ in range(count):
        run_round(fed, state)
        state.round += 1
    return state


def _eager(fed):
    """The same federation with every client's data made up front, as ClientData holds a data set."""
    pop = fed.clients.population
    made = [pop.make(k) for k in range(pop.num_clients)]
    x = torch.tensor(np.concatenate([x for x, _ in made]), dtype=torch.float32).to(fed.x0.dtype)
    y = torch.tensor(np.concatenate([y for _, y in made]), dtype=torch.int64)
    ends = np.cumsum([len(y) for _, y in made])
    parts = [np.arange(e - len(m[1]), e) for e, m in zip(ends, made)]
    c = fed.clients
    return dataclasses.replace(fed, clients=ClientData.from_partition(x, y, parts, c.seed, c.grad_fn, c.loss_scale))


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_clients_made_when_sampled_train_as_the_same_data_in_memory(algorithm):
    lazy = _fed(40, algorithm, "clients_per_round=8")
    eager = _eager(lazy)
    a, b = _rounds(lazy, initial_state(lazy), 3), _rounds(eager, initial_state(eager), 3)
    for key in a.server:
        assert torch.equal(a.server[key], b.server[key]), key
    for name in a.tables:
        assert a.tables[name].rows.keys() == b.tables[name].rows.keys()
        assert all(torch.equal(v, b.tables[name].rows[i]) for i, v in a.tables[name].rows.items())


def test_a_round_makes_and_touches_its_cohort_only(tmp_path):
    n, s = 5000, 10
    fed = _fed(n, "scaffold", f"clients_per_round={s}", "engine.client_state_device=disk", "local_steps=2",
               "local_epochs=null")
    pop = fed.clients.population
    assert pop.made == 0  # set-up makes no training client
    state = initial_state(fed, tmp_path)
    table = state.tables["c"]
    assert isinstance(table, DiskClientStateTable)
    previous: set[int] = set()
    visited: set[int] = set()
    for r in range(3):
        cohort = set(sample_cohort(fed.seed, r, n, s).tolist())
        made, read = pop.made, table.rows_read
        _rounds(fed, state, 1)
        assert pop.made - made == len(cohort - previous)  # the new members of the cohort, nobody else
        assert len(fed.clients.y) == int(fed.clients.size[sorted(cohort)].sum())  # memory: the cohort's rows
        assert table.rows_read - read <= s
        save_checkpoint(tmp_path / "ckpt.pt", state, None, "h")
        previous = cohort
        visited |= cohort
    assert int(np.asarray(table.touched).sum()) == len(visited) and table.rows_written == 3 * s
    on_disk = os.stat(table.path).st_blocks * 512  # a sparse file: only written rows take disk
    assert table.path.stat().st_size == n * 610 * 4 and on_disk <= len(visited) * 3 * 4096


def test_cohort_sampling_does_not_grow_with_the_population():
    tracemalloc.start()
    sample_cohort(0, 3, 10**8, 100)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2**20  # a permutation of 10^8 clients would take 800 MB


def _tables_equal(a, b, n):
    ids = list(range(n))
    return all(torch.equal(a.tables[k].gather(ids, torch.device("cpu")), b.tables[k].gather(ids, torch.device("cpu")))
               for k in a.tables)


@pytest.mark.parametrize("crash_before_file_write", [False, True])
def test_disk_table_resumes_bit_for_bit(tmp_path, monkeypatch, crash_before_file_write):
    n = 60
    fed = _fed(n, "scaffold", "clients_per_round=10", "engine.client_state_device=disk")
    whole = _rounds(fed, initial_state(fed, tmp_path / "whole"), 4)
    run, ckpt = tmp_path / "run", tmp_path / "run" / "ckpt.pt"
    first = _rounds(fed, initial_state(fed, run), 1)
    save_checkpoint(ckpt, first, None, "h")
    _rounds(fed, first, 1)
    if crash_before_file_write:  # the process dies between the checkpoint and the table file's update
        monkeypatch.setattr(DiskClientStateTable, "after_checkpoint", lambda self, r: None)
    save_checkpoint(ckpt, first, None, "h")
    monkeypatch.undo()
    _rounds(fed, first, 1)  # round 3 trained, then killed: never checkpointed
    del first
    resumed = initial_state(fed, run)
    load_checkpoint(ckpt, resumed, fed.device)
    assert resumed.round == 2
    _rounds(fed, resumed, 2)
    assert all(torch.equal(whole.server[k], resumed.server[k]) for k in whole.server)
    assert _tables_equal(whole, resumed, n)


def test_disk_table_ahead_of_its_checkpoint_refuses_to_resume(tmp_path, monkeypatch):
    fed = _fed(30, "scaffold", "clients_per_round=5", "engine.client_state_device=disk")
    state = _rounds(fed, initial_state(fed, tmp_path), 1)
    save_checkpoint(tmp_path / "ckpt.pt", state, None, "h")
    monkeypatch.setattr(client_state, "SPILL_BYTES", 1)  # rows go to the file before the next checkpoint
    _rounds(fed, state, 1)
    with pytest.raises(FedbenchError, match="cannot resume bit for bit"):
        load_checkpoint(tmp_path / "ckpt.pt", initial_state(fed, tmp_path), fed.device)


def test_fresh_run_does_not_read_a_leftover_table(tmp_path):
    fed = _fed(30, "scaffold", "clients_per_round=5", "engine.client_state_device=disk")
    old = _rounds(fed, initial_state(fed, tmp_path), 2)
    save_checkpoint(tmp_path / "ckpt.pt", old, None, "h")
    again = _rounds(fed, initial_state(fed, tmp_path), 2)  # not a resume: starts from zero state
    other = _rounds(fed, initial_state(fed, tmp_path / "elsewhere"), 2)
    assert all(torch.equal(again.server[k], other.server[k]) for k in other.server)


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_a_population_of_10_5_costs_its_cohort(tmp_path, algorithm):
    """CI's reduced cross-device check (docs/populations.md, 10^6 in scripts/bench_scale.py): N = 10^5 clients,
    cohorts of 100: set-up makes the test users only, a round holds and makes its cohort's data,
    reads and writes its cohort's state rows, and a checkpoint writes the rows that changed."""
    n, s, d = 100_000, 100, 610
    fed = _fed(n, algorithm, f"clients_per_round={s}", "engine.client_state_device=disk", "dataset.eval_users=200",
               "local_steps=2", "local_epochs=null")
    pop = fed.clients.population
    assert pop.made == 0 and len(fed.dataset.y_train) == 0
    state = initial_state(fed, tmp_path)
    for r in range(3):
        made = pop.made
        _rounds(fed, state, 1)
        assert pop.made - made <= s and fed.clients.index.shape[0] == s
        assert len(fed.clients.x) <= s * 2000
        save_checkpoint(tmp_path / "ckpt.pt", state, None, "h")
        assert (tmp_path / "ckpt.pt").stat().st_size < s * d * 4 + 2**16  # the changed rows, not N's
    for table in state.tables.values():
        assert table.rows == {} and table.rows_written == 3 * s and table.rows_read <= 3 * s
        assert os.stat(table.path).st_blocks * 512 <= 3 * s * 2 * 4096


def test_the_next_cohort_is_made_while_the_current_round_trains():
    """Issue 43: once round r's data is prepared, round r+1's cohort is made in a background thread,
    so no round after the first makes a user on the training thread; the last round prefetches
    nothing. (The data is the same as in memory, bit for bit: the first test of this file.)"""
    import threading

    n, s, rounds = 300, 10, 4
    fed = _fed(n, "fedavg", f"clients_per_round={s}", f"rounds={rounds}")
    pop = fed.clients.population
    makers: list[tuple[int, str]] = []
    make = pop.make
    pop.make = lambda k: (makers.append((k, threading.current_thread().name)), make(k))[1]
    state = initial_state(fed)
    for r in range(rounds):
        _rounds(fed, state, 1)
        assert (fed.clients._ahead is not None) == (r + 1 < rounds)  # the last round starts no thread
    first = sorted(sample_cohort(fed.seed, 0, n, s).tolist())
    assert sorted(k for k, _ in makers[:s]) == first and {who for _, who in makers[:s]} == {"MainThread"}
    assert len(makers) > s and {who for _, who in makers[s:]} == {"fedbench-prefetch"}
    assert pop.made == len(makers)  # every user made was put to use


def test_a_user_is_the_same_at_any_blas_thread_count():
    """The prefetching thread makes users with numpy's BLAS at one thread (y = argmax(x W^T + b) is a
    gemm): the largest users (2,000 samples) come out the same as at the machine's thread count."""
    from threadpoolctl import threadpool_limits

    from fedbench.data.synthetic import PerUserSynthetic

    gen = PerUserSynthetic(0, 2000, 60, 10, 1.0, 1.0, False)
    big = [int(k) for k in np.argsort(gen.sizes)[-3:]]
    with threadpool_limits(limits=1, user_api="blas"):
        alone = [gen.user(k) for k in big]
    with threadpool_limits(limits=max(2, os.cpu_count() or 2), user_api="blas"):
        shared = [gen.user(k) for k in big]
    for (xa, ya), (xb, yb) in zip(alone, shared):
        assert np.array_equal(xa, xb) and np.array_equal(ya, yb)
