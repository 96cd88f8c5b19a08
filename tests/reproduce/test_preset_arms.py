"""One arm run by hand from a paper's preset is that arm as the reproduction runs it (#40 §6): `fedbench run
experiment=fedadmm/table3 algorithm=fedprox` composes FedProx as Table III's arm does (rho = 0.1, E_i ~ U{1..E}),
through conf/arm/<preset>/<algorithm>.yaml."""

from __future__ import annotations

from omegaconf import OmegaConf

from fedbench.config.preflight import checked_compose
from fedbench.reproduce.catalog import load_catalog
from fedbench.reproduce.run import job_overrides

CATALOG = load_catalog()


def algorithm_node(overrides: list[str]) -> dict:
    return OmegaConf.to_container(checked_compose(overrides).algorithm, resolve=True)


def test_fedadmm_table3_fedprox_by_hand_is_the_reproductions_fedprox_arm():
    rep = CATALOG["fedadmm/table3"]
    for scale in rep.scales.values():
        arm = next(a for a in scale.arms if a.method == "FedProx")
        by_hand = [o for o in job_overrides(rep, scale, arm) if not o.startswith("algorithm.")]
        assert "algorithm=fedprox" in by_hand
        assert algorithm_node(by_hand) == algorithm_node(job_overrides(rep, scale, arm))
    fedprox = algorithm_node(["experiment=fedadmm/table3", "algorithm=fedprox"])
    assert fedprox["mu"] == 0.1 and fedprox["hetero_epochs"] is True
    # the command line still wins, and the preset's own method and other presets are untouched
    assert algorithm_node(["experiment=fedadmm/table3", "algorithm=fedprox", "algorithm.mu=0.01"])["mu"] == 0.01
    assert algorithm_node(["algorithm=fedprox"])["hetero_epochs"] is False
    assert algorithm_node(["experiment=fedadmm/table3"])["name"] == "fedadmm"
