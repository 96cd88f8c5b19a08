"""scripts/bench_engine.py times three loops on the same workload; they must compute the same round,
or its ratios compare different work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import require_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
bench_engine = require_module("bench_engine", "scripts/bench_engine.py")


@pytest.mark.parametrize("model", ["mclr", "mlp_2nn"])
def test_engine_sequential_and_bare_loops_compute_the_same_round(model):
    from fedbench.engine.loop import initial_state, run_round

    fed, _ = bench_engine.federation(model, S=4, B=10, K=3, executor="vmap")
    batches = bench_engine.CohortBatches(fed, 3)
    state = initial_state(fed)
    run_round(fed, state)  # round 0: the cohort and batches CohortBatches holds
    engine = state.server["x"]
    seq = bench_engine.sequential_round(fed, batches)()
    bare = bench_engine.bare_vmap_round(fed, batches)()
    moved = (engine - fed.x0).abs().max()
    assert moved > 1e-3  # the round trains
    assert torch.allclose(seq, engine, atol=1e-5) and torch.allclose(bare, engine, atol=1e-5)


def test_interleaved_medians_times_every_variant():
    calls = {"a": 0, "b": 0}

    def bump(k):
        def f():
            calls[k] += 1
        return f

    t = bench_engine.interleaved_medians({"a": bump("a"), "b": bump("b")}, repeats=3, min_seconds=0.0)
    assert set(t) == {"a", "b"} and calls == {"a": 4, "b": 4}  # a warm-up call and 3 timed passes each


def test_unequal_table_variants_compute_the_same_round():
    """bench_engine --unequal compares auto, vmap, stacked, loop and the padded engine on Dirichlet clients:
    the same round each, or the ratios compare different work."""
    from tests.conftest import require_data
    from fedbench.data.locations import fmnist_folder
    from fedbench.engine.loop import initial_state, run_round

    require_data(fmnist_folder() is not None, "Fashion-MNIST not installed")
    partition = ["partition=dirichlet", "partition.alpha=0.1"]
    feds = {name: bench_engine.unequal_federation("mclr", partition, executor, padded=name == "padded")[0]
            for name, executor in (("auto", "auto"), ("vmap", "vmap"), ("stacked", "stacked"), ("loop", "loop"),
                                   ("padded", "vmap"))}
    assert not feds["padded"].group_by_work and feds["auto"].group_by_work
    rounds = {}
    for name, fed in feds.items():
        state = initial_state(fed)
        run_round(fed, state)
        rounds[name] = state.server["x"]
    assert (rounds["auto"] - feds["auto"].x0).abs().max() > 1e-3
    for name in ("vmap", "stacked", "loop", "padded"):
        assert torch.allclose(rounds[name], rounds["auto"], atol=1e-5), name
