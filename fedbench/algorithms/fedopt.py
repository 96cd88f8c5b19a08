"""FedOpt: FedAvg's clients with an optimiser on the server (server step size = eta_g).

FedAdagrad, FedAdam, FedYogi: Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan,
"Adaptive Federated Optimization", ICLR 2021, arXiv:2003.00295, Algorithm 2.
FedAvgM: Hsu, Qi, Brown, "Measuring the Effects of Non-Identical Data Distribution for Federated
Visual Classification", arXiv:1909.06335, 2019.

Round: clients run local SGD from x and send Delta_i = x_i - x (d floats each way); the server
forms the pseudo-gradient Delta = sum_i w_i Delta_i and applies a `server_opt` transform to it.
The transform's state (m, v) sits in the server dict next to x.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.core.types import Cohort, State
from fedbench.algorithms.common import weighted_mean
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.registry import register
from fedbench.algorithms import server_opt
from fedbench.algorithms.server_opt import ServerOptimizer
from fedbench.core.errors import check


@dataclass
class ServerOptAlgorithm(FedAvg):
    """FedAvg's client update; the server step is `self.optimizer()` applied to the mean delta."""

    def optimizer(self) -> ServerOptimizer:
        raise NotImplementedError

    def init(self, x0):
        return {"x": x0.clone(), **self.optimizer().init(x0)}

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        delta = weighted_mean(up["delta"], cohort.weights)  # Reddi et al. Alg. 2: Delta_t
        opt_state = {k: v for k, v in server.items() if k != "x"}
        step, opt_state = self.optimizer().update(delta, opt_state)
        return {"x": server["x"] + step, **opt_state}


@register("fedavgm", "FedAvgM: FedAvg with server momentum on the averaged delta (Hsu et al. 2019)")
@dataclass
class FedAvgM(ServerOptAlgorithm):
    momentum: float = 0.9

    def validate(self) -> None:
        check(0 <= self.momentum < 1, f"algorithm.momentum must lie in [0, 1), got {self.momentum}")

    def optimizer(self) -> ServerOptimizer:
        return server_opt.momentum(self.setting.eta_g, self.momentum)


@dataclass
class _Adaptive(ServerOptAlgorithm):
    beta1: float = 0.9
    tau: float = 1e-3  # adaptivity: x += eta_g * m / (sqrt(v) + tau)
    v0: float | None = None  # v_{-1}; None: tau^2 (Reddi et al. Alg. 2 asks v_{-1} >= tau^2)

    def validate(self) -> None:
        check(0 <= self.beta1 < 1, f"algorithm.beta1 must lie in [0, 1), got {self.beta1}")
        check(self.tau > 0, f"algorithm.tau must be > 0, got {self.tau}")
        check(self.v0 is None or self.v0 >= 0, f"algorithm.v0 must be >= 0 or null, got {self.v0}")

    @property
    def initial_v(self) -> float:
        return self.tau**2 if self.v0 is None else float(self.v0)


@register("fedadagrad", "FedAdagrad: FedAvg clients, Adagrad on the server (Reddi et al. 2021)")
@dataclass
class FedAdagrad(_Adaptive):
    def optimizer(self) -> ServerOptimizer:
        return server_opt.adagrad(self.setting.eta_g, self.beta1, self.tau, self.initial_v)


@dataclass
class _AdamLike(_Adaptive):
    beta2: float = 0.99

    def validate(self) -> None:
        super().validate()
        check(0 < self.beta2 < 1, f"algorithm.beta2 must lie in (0, 1), got {self.beta2}")


@register("fedadam", "FedAdam: FedAvg clients, Adam (no bias correction) on the server (Reddi et al. 2021)")
@dataclass
class FedAdam(_AdamLike):
    def optimizer(self) -> ServerOptimizer:
        return server_opt.adam(self.setting.eta_g, self.beta1, self.beta2, self.tau, self.initial_v)


@register("fedyogi", "FedYogi: FedAvg clients, Yogi on the server (Reddi et al. 2021)")
@dataclass
class FedYogi(_AdamLike):
    def optimizer(self) -> ServerOptimizer:
        return server_opt.yogi(self.setting.eta_g, self.beta1, self.beta2, self.tau, self.initial_v)
