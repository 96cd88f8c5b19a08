"""FedCM (Xu, Wang, Wang, Yao, "FedCM: Federated Learning with Client-level Momentum",
arXiv:2106.10874, 2021), Algorithm 1; settings from losac.md §3.2 and fedspeed.md §3.5.

The server keeps a client-level momentum Delta (zero at the start) and broadcasts (x, Delta),
2d floats. Each local step moves along v = alpha g + (1 - alpha) Delta. Clients send
Delta_i = x_i - x (d floats); the server sets Delta <- mean_i -Delta_i / (K_i eta_l), the average
pseudo-gradient per unit step, and x <- x + eta_g mean_i Delta_i (FedCM's x - eta_g eta_l K Delta).
K_i eta_l goes up as metadata: the server scheduled it, so it is not counted as communication.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.core.types import Cohort, State
from fedbench.algorithms import server_opt
from fedbench.algorithms.base import EXTRAS, Algorithm
from fedbench.algorithms.common import lr_per_client, local_sgd, momentum_steps, weighted_mean
from fedbench.algorithms.registry import register
from fedbench.core.errors import check


@register("fedcm", "FedCM: local steps along alpha*g + (1-alpha)*server momentum of pseudo-gradients")
@dataclass
class FedCM(Algorithm):
    sends = (2, 1)  # per client and round, in d-vectors: (x, Delta) down, dx_i up (losac.md §3.2)
    lr_rows = True
    local_extras = EXTRAS
    metadata_keys = ("step_length",)
    alpha: float = 0.1  # weight of the fresh local gradient; 1 is FedAvg

    def validate(self) -> None:
        check(0 < self.alpha <= 1, f"algorithm.alpha must lie in (0, 1], got {self.alpha}")

    def init(self, x0):
        return {"x": x0.clone(), "momentum": torch.zeros_like(x0)}

    def broadcast(self, server: State, round_: int) -> State:
        return {"x": server["x"], "momentum": server["momentum"]}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, m = down["x"], down["momentum"]
        y = local_sgd(work, x, lambda t, Y, G, batch: self.alpha * G + (1 - self.alpha) * m)
        # K_i eta_l (K_i: the steps' displacement under a shared local momentum, common.momentum_steps)
        step_length = momentum_steps(work.steps.to(x.dtype), work.extras.momentum) * lr_per_client(work.lr)
        return {"delta": y - x, "step_length": step_length}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        pseudo_grad = -up["delta"] / up["step_length"][:, None]
        momentum = weighted_mean(pseudo_grad, cohort.weights)
        plain = server_opt.sgd(self.setting.eta_g)  # x <- x + eta_g mean_i Delta_i
        return {**server_opt.apply(plain, server, weighted_mean(up["delta"], cohort.weights)), "momentum": momentum}
