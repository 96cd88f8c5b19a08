"""FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in Heterogeneous
Networks", MLSys 2020, arXiv:1812.06127).

Each client approximately minimises h_i(w) = f_i(w) + (mu/2) ||w - x||^2 (eq. 2) by local SGD
from x; the server averages the deltas as FedAvg does (server step eta_g). mu = 0 is FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.core.types import State
from fedbench.algorithms.common import local_sgd
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.registry import register
from fedbench.core.errors import check


@register("fedprox", "FedProx: local SGD on f_i + (mu/2)||w - x||^2, FedAvg aggregation")
@dataclass
class FedProx(FedAvg):
    mu: float = 0.01

    def validate(self) -> None:
        check(self.mu >= 0, f"algorithm.mu must be >= 0, got {self.mu}")

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"]

        def direction(t, W, G, batch):
            return G + self.mu * (W - x)  # grad h_i(w), eq. (2)

        return {"delta": local_sgd(work, x, direction) - x}, client
