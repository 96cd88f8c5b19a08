"""The algorithm contract of test_algorithm_contract.py (state shapes stable, chunking irrelevant,
seeds reproducible) for LoSAC, FedSaga and both FedADMMs."""

from __future__ import annotations

import pytest

import tests.algorithms.test_algorithm_contract as contract

EPOCHS = ["local_steps=null", "local_epochs=2"]  # FedADMM draws E_i from {1..local_epochs}
UNDER_TEST = {
    "losac": ["algorithm=losac", "algorithm.blocks=3"],
    "losac_paper_l1": ["algorithm=losac_paper", "algorithm.blocks=3", "algorithm.regularizer=l1", "algorithm.lam=0.01"],
    "fedsaga": ["algorithm=fedsaga", "algorithm.blocks=3"],
    "fedadmm": ["algorithm=fedadmm", "algorithm.rho=0.1", *EPOCHS],
    "fedadmm_local": ["algorithm=fedadmm", "algorithm.local_init=local", "algorithm.server_step=participation", *EPOCHS],
    "fedadmm_lowrank_l1": ["algorithm=fedadmm_lowrank", "algorithm.regularizer=l1", "algorithm.grad_scale=one"],
}


@pytest.mark.parametrize("name", sorted(UNDER_TEST))
def test_contract(name, monkeypatch):
    monkeypatch.setitem(contract.ALGORITHMS_UNDER_TEST, name, UNDER_TEST[name])
    contract.test_contract(name)
