"""FedAvg and FedSGD (McMahan et al., AISTATS 2017, arXiv:1602.05629).

FedAvg: each sampled client runs local SGD from x; the server moves x by eta_g times the
weighted mean of the client deltas (eta_g = 1 is plain model averaging; Reddi et al. 2021, Alg. 1).
FedSGD: each client sends its full local gradient at x; x <- x - eta_l * eta_g * mean gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.core.types import Cohort, State
from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.common import local_sgd, weighted_mean
from fedbench.algorithms.registry import register


@register("fedavg", "FedAvg: local SGD, server averages the deltas (with server step eta_g)")
@dataclass
class FedAvg(Algorithm):
    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"]
        return {"delta": local_sgd(work, x) - x}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        x = server["x"] + self.setting.eta_g * weighted_mean(up["delta"], cohort.weights)
        return {**server, "x": x}


@register("fedsgd", "FedSGD: one full-batch gradient per client per round, server SGD step")
@dataclass
class FedSGD(Algorithm):
    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"].expand(work.num_clients, -1)
        G, _ = work.full_grad(x)
        return {"grad": G}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        step = self.setting.local_lr(cohort.round) * self.setting.eta_g  # the round's eta_l, decay included
        return {**server, "x": server["x"] - step * weighted_mean(up["grad"], cohort.weights)}
