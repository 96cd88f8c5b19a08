"""Contract tests over every baseline, in the style of optax's `_OPTIMIZERS_UNDER_TEST`: state
shapes stable across rounds, the cohort's chunking irrelevant, a seed reproducing the run."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.problems import STOCHASTIC, build
from fedbench.engine.loop import initial_state, run

ALGORITHMS_UNDER_TEST = {
    "fedprox": ["algorithm=fedprox", "algorithm.mu=0.1"],
    "scaffold": ["algorithm=scaffold"],
    "scaffold_I": ["algorithm=scaffold", "algorithm.option=I"],
    "scaffold_prox": ["algorithm=scaffold_prox", "algorithm.lam=0.05"],
    "feddyn": ["algorithm=feddyn", "algorithm.alpha=0.5"],
    "fedcm": ["algorithm=fedcm"],
    "fedavgm": ["algorithm=fedavg/avgm", "eta_g=0.5"],
    "fedadam": ["algorithm=fedavg/adam", "eta_g=0.05"],
    "fedyogi": ["algorithm=fedavg/yogi", "eta_g=0.05"],
    "fedadagrad": ["algorithm=fedavg/adagrad", "eta_g=0.05"],
    "mime_svrg": ["algorithm=mime_svrg"],
    "dsgd": ["algorithm=dsgd"],
}
COMMON = [*STOCHASTIC, "rounds=3", "eta_l_decay=0.9"]


def _run(fed):
    shapes = []
    state = initial_state(fed)
    shapes.append({k: (v.shape, v.dtype) for k, v in state.server.items()})
    for rounds in (1, 3):
        state = run(dataclasses.replace(fed, rounds=rounds), state)
        shapes.append({k: (v.shape, v.dtype) for k, v in state.server.items()})
    return state, shapes


@pytest.mark.parametrize("name", sorted(ALGORITHMS_UNDER_TEST))
def test_contract(name):
    fed = build(*COMMON, *ALGORITHMS_UNDER_TEST[name])
    state, shapes = _run(fed)

    # state shapes and dtypes stable across rounds; client rows have their declared shapes
    assert shapes[0] == shapes[1] == shapes[2]
    specs = fed.algorithm.client_states()
    for table_name, table in state.tables.items():
        assert table.rows, f"{table_name}: the cohorts' rows were never written"
        for row in table.rows.values():
            assert row.shape == specs[table_name].shape and row.dtype == fed.x0.dtype

    x = fed.algorithm.model(state.server)
    assert torch.isfinite(x).all() and not torch.equal(x, fed.x0)

    # the same run with one client per chunk
    chunked, _ = _run(dataclasses.replace(fed, client_chunk=1))
    for key, value in state.server.items():
        assert torch.allclose(chunked.server[key], value, rtol=0, atol=1e-12), key
    for table_name, table in state.tables.items():
        for i, row in table.rows.items():
            assert torch.allclose(chunked.tables[table_name].rows[i], row, rtol=0, atol=1e-12)

    # a seed reproduces the run from scratch; another seed changes it
    again, _ = _run(build(*COMMON, *ALGORITHMS_UNDER_TEST[name]))
    assert all(torch.equal(again.server[k], v) for k, v in state.server.items())
    other, _ = _run(build(*COMMON, *ALGORITHMS_UNDER_TEST[name], "seed=1"))
    assert not torch.equal(other.server["x"], state.server["x"])
