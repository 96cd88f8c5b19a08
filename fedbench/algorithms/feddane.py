"""FedDANE (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "FedDANE: A Federated Newton-Type Method",
Asilomar 2019, arXiv:2001.01920), as FedSSO's baseline (papers/fedsso.md §3.4).

A FedDANE round has two exchanges, run as two engine rounds (so `rounds` counts exchanges and each
exchange samples its own cohort, as in the original):
  even round: clients send their full local gradient at x_k; g_bar = sum_i p_i grad f_i(x_k)   (Alg. 1 l. 3-4)
  odd round:  clients approximately solve
                min_w f_i(w) + <g_bar - grad f_i(x_k), w> + (mu/2)|w - x_k|^2                (Alg. 1 l. 6)
              by local SGD from x_k; x_{k+1} = x_k + eta_g sum_i p_i (w_i - x_k)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import Algorithm, Cohort, State
from fedbench.algorithms.common import local_sgd, weighted_mean
from fedbench.algorithms.registry import register
from fedbench.errors import check


@register("feddane", "FedDANE: gradient exchange, then local DANE subproblems (two exchanges per round)")
@dataclass
class FedDANE(Algorithm):
    mu: float = 0.001

    def validate(self) -> None:
        check(self.mu >= 0, f"algorithm.mu must be >= 0, got {self.mu}")

    def init(self, x0):
        return {"x": x0.clone(), "g_bar": torch.zeros_like(x0)}

    def broadcast(self, server: State, round_: int) -> State:
        if round_ % 2 == 0:
            return {"x": server["x"]}
        return {"x": server["x"], "g_bar": server["g_bar"]}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"]
        g_x, _ = work.full_grad(x.expand(work.num_clients, -1))  # grad f_i(x_k)
        if "g_bar" not in down:
            return {"grad": g_x}, client
        shift = down["g_bar"] - g_x  # the DANE linear term (recomputed locally: no communication)
        W = local_sgd(work, x, lambda t, W, G, batch: G + shift + self.mu * (W - x))
        return {"delta": W - x}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        if "grad" in up:
            return {**server, "g_bar": weighted_mean(up["grad"], cohort.weights)}
        return {**server, "x": server["x"] + self.setting.eta_g * weighted_mean(up["delta"], cohort.weights)}
