"""MimeSVRG: Mime with plain SGD as the base optimiser (Karimireddy, Jaggi, Kale, Mohri, Reddi,
Stich, Suresh, "Breaking the centralized barrier for cross-device federated learning", NeurIPS
2021; arXiv:2008.03606 "Mime: Mimicking Centralized Stochastic Algorithms in FL"), Algorithm 1;
the LoSAC paper's baseline (losac.md §3.4).

A two-phase round. Phase 1: the cohort receives x and uploads its full local gradients
grad f_i(x); the server sends back c = sum_i w_i grad f_i(x). Phase 2: each client runs local
SGD with the SVRG correction on the same minibatch,
    y_i <- y_i - eta_l ( g_i(y_i; zeta) - g_i(x; zeta) + c ),
and uploads y_i - x; x <- x + eta_g mean_i (y_i - x). Down 2d (x, c), up 2d per client.
No persistent client state, no optimiser state (SGD base).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.core.types import Cohort, State
from fedbench.algorithms import server_opt
from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.common import local_sgd, weighted_mean
from fedbench.algorithms.registry import register


@register("mime_svrg", "MimeSVRG: Mime with SGD base: SVRG-corrected local steps with the cohort's gradient at x")
@dataclass
class MimeSVRG(Algorithm):
    sends = (2, 2)  # per client and round, in d-vectors: (x, c) down, (grad f_i(x), y_i) up (losac.md §3.4)
    two_phase = True

    def prepare(self, down: State, client: State, work) -> State:
        G, _ = work.full_grad(down["x"].expand(work.num_clients, -1))  # grad f_i(x)
        return {"grad": G}

    def rebroadcast(self, server: State, down: State, prepared: State, cohort: Cohort) -> State:
        return {**down, "c": weighted_mean(prepared["grad"], cohort.weights)}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, c = down["x"], down["c"]
        X = x.expand(work.num_clients, -1)

        def direction(t, Y, G, batch):
            G_x, _ = work.grad(X, batch)  # the same minibatch zeta at the server model
            return G - G_x + c

        return {"delta": local_sgd(work, x, direction) - x}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        return server_opt.apply(server_opt.sgd(self.setting.eta_g), server, weighted_mean(up["delta"], cohort.weights))
