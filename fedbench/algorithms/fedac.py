"""FedAc: federated accelerated SGD (Yuan & Ma, "Federated Accelerated Stochastic Gradient
Descent", NeurIPS 2020, arXiv:2006.08950), as FedSSO's baseline (papers/fedsso.md §3.7).

Clients hold (w, w_ag), both set to the broadcast (x, x_ag). Each local step (eq. 3.1 of Yuan & Ma):
  w_md = w / beta + (1 - 1/beta) w_ag,   g = grad f_i(w_md; xi)
  w_ag <- w_md - eta g,                  w <- (1 - 1/alpha) w + w_md / alpha - gamma g
and the server averages both sequences. FedAc-I: gamma = max(eta, sqrt(eta / (mu K))),
alpha = 1/(gamma mu), beta = alpha + 1; FedAc-II: alpha = 3/(2 gamma mu) - 1/2, beta = 2 alpha^2/(alpha - 1)
(Thm. 3.1 / 3.3), with eta = eta_l and K the local steps. The model is x_ag.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.core.types import Cohort, State
from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.common import weighted_mean
from fedbench.algorithms.registry import register
from fedbench.core.errors import check, unknown_choice

VARIANTS = ("I", "II")


@register("fedac", "FedAc: accelerated local SGD with synchronised (w, w_ag) pairs (FedAc-I / FedAc-II)")
@dataclass
class FedAc(Algorithm):
    sends = (2, 2)  # per client and round, in d-vectors: (x, x_ag) each way (fedsso.md §3.7: 2 n_c)
    mu: float = 1e-4
    variant: str = "I"

    def validate(self) -> None:
        check(self.mu > 0, f"algorithm.mu (strong convexity) must be > 0, got {self.mu}")
        if self.variant not in VARIANTS:
            raise unknown_choice("algorithm.variant", self.variant, VARIANTS)

    def init(self, x0):
        return {"x": x0.clone(), "x_ag": x0.clone()}

    def broadcast(self, server: State, round_: int) -> State:
        return {"x": server["x"], "x_ag": server["x_ag"]}

    def coefficients(self, eta: float, steps: torch.Tensor):
        """(alpha, beta, gamma) per client [s, 1] for local step size eta and K = steps."""
        K = steps.to(torch.float64).clamp(min=1)[:, None]
        gamma = torch.maximum(torch.full_like(K, eta), (eta / (self.mu * K)).sqrt())
        if self.variant == "I":
            alpha = 1 / (gamma * self.mu)
            beta = alpha + 1
        else:
            alpha = 3 / (2 * gamma * self.mu) - 0.5
            beta = 2 * alpha**2 / (alpha - 1)
        return alpha, beta, gamma

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, x_ag = down["x"], down["x_ag"]
        s = work.num_clients
        W, W_ag = x.expand(s, -1).clone(), x_ag.expand(s, -1).clone()
        alpha, beta, gamma = (c.to(x.dtype) for c in self.coefficients(work.lr, work.steps))
        for t in range(work.max_steps):
            W_md = W / beta + (1 - 1 / beta) * W_ag
            G, _ = work.grad(W_md, work.batch(t))
            W_ag = work.masked(t, W_md - work.lr * G, W_ag)
            W = work.masked(t, (1 - 1 / alpha) * W + W_md / alpha - gamma * G, W)
        return {"delta": W - x, "delta_ag": W_ag - x_ag}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        w = cohort.weights
        return {**server, "x": server["x"] + weighted_mean(up["delta"], w),
                "x_ag": server["x_ag"] + weighted_mean(up["delta_ag"], w)}

    def model(self, server: State):
        return server["x_ag"]
