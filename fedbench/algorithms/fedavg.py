"""FedAvg and FedSGD (McMahan et al., AISTATS 2017, arXiv:1602.05629).

FedAvg: each sampled client runs local SGD from x and sends Delta_i = x_i - x; the server applies
`algorithm.server_opt` to the pseudo-gradient Delta = sum_i w_i Delta_i (Reddi et al., "Adaptive
Federated Optimization", ICLR 2021, arXiv:2003.00295, Alg. 1-2). The default, sgd, is
x <- x + eta_g Delta (eta_g = 1 is plain model averaging); momentum is FedAvgM (Hsu, Qi, Brown,
arXiv:1909.06335, 2019); adagrad, adam and yogi are FedAdagrad, FedAdam and FedYogi (Reddi et al.
Alg. 2), the server step size being eta_g. The optimiser's state (m, v) sits in the server dict.
FedSGD: each client sends its full local gradient at x; x <- x - eta_l * eta_g * mean gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedbench.core.types import Cohort, State
from fedbench.algorithms import server_opt
from fedbench.algorithms.base import EXTRAS, Algorithm
from fedbench.algorithms.common import local_sgd, weighted_mean, with_extras
from fedbench.algorithms.registry import register
from fedbench.algorithms.server_opt import ServerOptimizer


@register("fedavg", "FedAvg: local SGD, server optimiser (server_opt: sgd|momentum|adagrad|adam|yogi) on the mean delta")
@dataclass
class FedAvg(Algorithm):
    sends = (1, 1)  # per client and round, in d-vectors: x down, x_i - x up (McMahan et al.; fedsso.md Table 2: n_c); any server_opt
    lr_rows = True
    local_extras = EXTRAS
    server_opt: str | dict[str, Any] = field(default_factory=lambda: {"name": "sgd"})

    def __post_init__(self):
        self.server_opt_spec = server_opt.parse(self.server_opt)  # a ConfigError on a bad name or value

    def optimizer(self) -> ServerOptimizer:
        return self.server_opt_spec.build(self.setting.eta_g)

    def init(self, x0):
        return {"x": x0.clone(), **self.optimizer().init(x0)}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"]
        return {"delta": local_sgd(work, x) - x}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        return server_opt.apply(self.optimizer(), server, weighted_mean(up["delta"], cohort.weights))


@register("fedsgd", "FedSGD: one full-batch gradient per client per round, server SGD step")
@dataclass
class FedSGD(Algorithm):
    sends = (1, 1)  # per client and round, in d-vectors: x down, grad f_i(x) up (fedsso.md §3.2)
    lr_rows = True
    local_extras = EXTRAS  # one full-batch step: clip(g) + wd x; momentum's first step is a plain step

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"].expand(work.num_clients, -1)
        G, _ = work.full_grad(x)
        return {"grad": with_extras(work.extras, G, x)}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        step = self.setting.local_lr(cohort.round) * self.setting.eta_g  # the round's eta_l, decay included
        return {**server, "x": server["x"] - step * weighted_mean(up["grad"], cohort.weights)}
