"""The public contract kit (fedbench.testing) fails on algorithms that break the contract: each check can fail."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fedbench.algorithms.common import weighted_mean
from fedbench.algorithms.fedavg import FedAvg
from fedbench.testing import Contract

@pytest.fixture(autouse=True)
def no_plugin_outlives_its_test():
    """Plugins adopted in this process are forgotten after each test: names in later messages are the built-ins'."""
    yield
    from fedbench.config.plugins import forget_adopted

    forget_adopted()



@dataclass
class Undeclared(FedAvg):
    sends = None  # what it sends is not declared


@dataclass
class MiscountedUp(FedAvg):
    sends = (1, 2)  # declares two vectors up; sends one


@dataclass
class MixesClients(FedAvg):
    """Each client's upload depends on the others of its chunk: the client chunk changes the run."""

    def client_update(self, down, client, work):
        up, client = super().client_update(down, client, work)
        return {"delta": up["delta"] - 0.5 * up["delta"].mean(0, keepdim=True)}, client


@dataclass
class HiddenState(FedAvg):
    """A round counter kept outside the server state: a resumed run does not get it back."""

    def aggregate(self, server, up, cohort):
        self.rounds_seen = getattr(self, "rounds_seen", 0) + 1
        step = weighted_mean(up["delta"], cohort.weights) * (1 + 0.1 * self.rounds_seen)
        return {**server, "x": server["x"] + step}


def contract(tmp_path, cls) -> Contract:
    folder = tmp_path / "conf" / "algorithm"
    folder.mkdir(parents=True)
    name = f"kit_{cls.__name__.lower()}"
    (folder / f"{name}.yaml").write_text(f"_target_: {__name__}.{cls.__name__}\nname: {name}\n")
    return Contract([f"algorithm={name}"], config_dir=tmp_path / "conf")


def test_an_undeclared_count_fails(tmp_path):
    with pytest.raises(NotImplementedError, match="Undeclared declares no communication count: set `sends"):
        contract(tmp_path, Undeclared).check_declared_counts()


def test_a_wrong_count_fails(tmp_path):
    with pytest.raises(AssertionError, match="but MiscountedUp declares"):
        contract(tmp_path, MiscountedUp).check_declared_counts()


def test_clients_that_see_each_other_fail_the_chunk_check(tmp_path):
    kit = contract(tmp_path, MixesClients)
    kit.check_declared_counts()  # the rest of its contract holds
    with pytest.raises(AssertionError, match="server x"):
        kit.check_client_chunk()


def test_state_outside_the_server_dict_fails_the_resume_check(tmp_path):
    kit = contract(tmp_path, HiddenState)
    kit.check_client_chunk()
    with pytest.raises(AssertionError, match="server x"):
        kit.check_resume(tmp_path)


def test_fedavg_passes_every_check(tmp_path):
    Contract(["algorithm=fedavg"]).check_all(tmp_path)
