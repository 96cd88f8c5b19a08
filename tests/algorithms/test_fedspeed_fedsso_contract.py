"""Contract checks for FedSpeed, FedSpeed-Ing, FedSSO and FedSSO's comparison methods: the cohort's
chunking does not change a run, and client rows keep their declared shapes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.conftest import make_cfg
from fedbench.runs.build import build_federation
from fedbench.engine.loop import run

COMMON = ["dataset=lstsq", "dataset.dim=5", "partition=natural", "num_clients=8", "model=linear",
          "engine.dtype=float64", "batch_size=4", "local_epochs=null", "local_steps=3", "eval_every=0",
          "eta_l=0.02", "eta_l_decay=0.9", "rounds=3"]
UNDER_TEST = {
    "fedspeed": ["algorithm=fedspeed", "clients_per_round=5"],
    "fedspeed_participating": ["algorithm=fedspeed", "algorithm.server_correction_avg=participating", "clients_per_round=5"],
    "fedspeed_ing": ["algorithm=fedspeed_ing", "algorithm.zeta=0.3", "clients_per_round=5"],
    "fedsso": ["algorithm=fedsso", "clients_per_round=8"],
    "fedsso/ref_v1": ["algorithm=fedsso/ref_v1", "clients_per_round=8"],
    "feddane": ["algorithm=feddane", "clients_per_round=5"],
    "fedac": ["algorithm=fedac", "clients_per_round=5"],
    "fednl": ["algorithm=fednl", "clients_per_round=8"],
}


@pytest.mark.parametrize("name", sorted(UNDER_TEST))
def test_chunking_does_not_change_the_run(name):
    fed, _ = build_federation(make_cfg(*COMMON, *UNDER_TEST[name]))
    whole = run(fed)
    chunked = run(dataclasses.replace(fed, client_chunk=2))
    for key, value in whole.server.items():
        assert torch.allclose(chunked.server[key], value, rtol=1e-12, atol=1e-12), key
    assert not torch.equal(fed.algorithm.model(whole.server), fed.x0)
    specs = fed.algorithm.client_states()
    for table_name, table in whole.tables.items():
        assert table.rows
        for i, row in table.rows.items():
            assert row.shape == specs[table_name].shape
            assert torch.allclose(chunked.tables[table_name].rows[i], row, rtol=1e-12, atol=1e-12)
