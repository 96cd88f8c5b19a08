"""DSGD, distributed (minibatch) SGD: one gradient step per round (losac.md §3.5; the setting
the DLG attack assumes, Zhu, Liu, Han, "Deep Leakage from Gradients", NeurIPS 2019).

Each sampled client uploads the gradient of its first local minibatch at x (its full local
gradient with batch_size=0); x <- x - eta_g * mean_i eta_l g_i. The attacker sees (x, g_i).
The round's eta_l goes up as metadata (the server set it), so decays apply.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.core.types import Cohort, State
from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.common import weighted_mean
from fedbench.algorithms.registry import register


@register("dsgd", "DSGD: each client sends one minibatch gradient at x; one server SGD step per round")
@dataclass
class DSGD(Algorithm):
    sends = (1, 1)  # per client and round, in d-vectors: x down, one gradient up (losac.md §3.5)
    metadata_keys = ("lr",)

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        G, _ = work.grad(down["x"].expand(work.num_clients, -1), work.batch(0))
        return {"grad": G, "lr": G.new_full((work.num_clients,), work.lr)}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        step = weighted_mean(up["lr"][:, None] * up["grad"], cohort.weights)
        return {**server, "x": server["x"] - self.setting.eta_g * step}
