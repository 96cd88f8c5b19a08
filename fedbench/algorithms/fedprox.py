"""FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in Heterogeneous
Networks", MLSys 2020, arXiv:1812.06127).

Each client approximately minimises h_i(w) = f_i(w) + (mu/2) ||w - x||^2 (eq. 2) by local SGD
from x; the server averages the deltas as FedAvg does (server step eta_g). mu = 0 is FedAvg.
hetero_epochs: client i runs its own E_i ~ U{1..E} epochs (variable local work, which FedProx's inexact
local solves allow), drawn from FedADMM's stream: the FedADMM paper's §V-A gives FedProx FedADMM's draws.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.core.types import State
from fedbench.algorithms.common import check_hetero_schedule, local_sgd, with_hetero_epochs
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.registry import register
from fedbench.core.errors import check


@register("fedprox", "FedProx: local SGD on f_i + (mu/2)||w - x||^2, FedAvg aggregation")
@dataclass
class FedProx(FedAvg):
    sends = (1, 1)  # per client and round, in d-vectors: as FedAvg (Li et al. 2020)
    mu: float = 0.01
    hetero_epochs: bool = False  # E_i ~ U{1..local_epochs} per client and round (the FedADMM presets set it)

    def validate(self) -> None:
        check(self.mu >= 0, f"algorithm.mu must be >= 0, got {self.mu}")

    def validate_schedule(self, local_steps: int | None, local_epochs: int | None) -> None:
        check_hetero_schedule(self.hetero_epochs, local_steps, local_epochs)

    def work_of(self, work):
        return with_hetero_epochs(work, self.hetero_epochs)  # E_i ~ U{1..E}, the client's own stream

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"]
        work = self.work_of(work)

        def direction(t, W, G, batch):
            return G + self.mu * (W - x)  # grad h_i(w), eq. (2)

        return {"delta": local_sgd(work, x, direction) - x}, client
