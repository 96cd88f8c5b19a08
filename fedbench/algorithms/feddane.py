"""FedDANE (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "FedDANE: A Federated Newton-Type Method",
Asilomar 2019, arXiv:2001.01920), as FedSSO's baseline (papers/fedsso.md §3.4).

One round, two exchanges with the same cohort (a two-phase round; the original draws a second
cohort for the second exchange, the FedSSO paper runs both with all clients):
  1. clients send their full local gradient at x_k; g_bar = sum_i p_i grad f_i(x_k)     (Alg. 1 l. 3-4)
  2. clients approximately solve, by local SGD from x_k,
        min_w f_i(w) + <g_bar - grad f_i(x_k), w> + (mu/2)|w - x_k|^2                 (Alg. 1 l. 6)
     and the server sets x_{k+1} = x_k + eta_g sum_i p_i (w_i - x_k)
Down 2d and up 2d floats per client per round (FedSSO Table 2: 2 n_c).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.core.types import Cohort, State
from fedbench.algorithms import server_opt
from fedbench.algorithms.base import EXTRAS, Algorithm
from fedbench.algorithms.common import local_sgd, weighted_mean
from fedbench.algorithms.registry import register
from fedbench.core.errors import check


@register("feddane", "FedDANE: gradient exchange, then local DANE subproblems (two-phase rounds)")
@dataclass
class FedDANE(Algorithm):
    sends = (2, 2)  # per client and round, in d-vectors: (x, g_bar) down, (grad f_i(x), w_i) up (fedsso.md §3.4: 2 n_c)
    local_extras = EXTRAS
    mu: float = 0.001

    two_phase = True

    def validate(self) -> None:
        check(self.mu >= 0, f"algorithm.mu must be >= 0, got {self.mu}")

    def prepare(self, down: State, client: State, work) -> State:
        G, _ = work.full_grad(down["x"].expand(work.num_clients, -1))
        return {"grad": G}

    def rebroadcast(self, server: State, down: State, prepared: State, cohort: Cohort) -> State:
        return {**down, "g_bar": weighted_mean(prepared["grad"], cohort.weights)}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"]
        g_x, _ = work.full_grad(x.expand(work.num_clients, -1))  # recomputed locally: no communication
        shift = down["g_bar"] - g_x  # the DANE linear term
        W = local_sgd(work, x, lambda t, W, G, batch: G + shift + self.mu * (W - x))
        return {"delta": W - x}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        return server_opt.apply(server_opt.sgd(self.setting.eta_g), server, weighted_mean(up["delta"], cohort.weights))
