"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, "SCAFFOLD: Stochastic Controlled
Averaging for Federated Learning", ICML 2020, arXiv:1910.06378), Algorithm 1, and SCAFFOLD-Prox.

State: server x and control variate c; every client its own c_i (all zero at the start).
Down (x, c), 2d floats; up (Delta y_i, Delta c_i), 2d floats. Line numbers are Algorithm 1's.

SCAFFOLD-Prox (LoSAC paper's baseline, spec losac.md §3.3) applies prox_{eta_l Psi} after every
local step; option II then reads the post-prox displacement. The server takes no prox step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.core.types import ClientStateSpec, Cohort, cohort_sum, Setting, State
from fedbench.algorithms import server_opt
from fedbench.algorithms.base import EXTRAS, Algorithm
from fedbench.algorithms.common import local_sgd, momentum_steps, weighted_mean
from fedbench.algorithms.prox import Regularizer
from fedbench.algorithms.registry import register
from fedbench.core.errors import check, unknown_choice

OPTIONS = ("I", "II")


@register("scaffold", "SCAFFOLD: control-variate corrected local SGD (option I or II), server step eta_g")
@dataclass
class Scaffold(Algorithm):
    sends = (2, 2)  # per client and round, in d-vectors: (x, c) down, (dy_i, dc_i) up (losac.md §3.3; fedsso.md Table 2: 2 n_c)
    lr_rows = True
    local_extras = EXTRAS
    option: str = "II"  # I: c_i+ = grad f_i(x) (an extra full pass); II: from the local displacement
    regularizer: str = "none"  # none | l1 | nuclear: SCAFFOLD-Prox's Psi
    lam: float = 0.0  # Psi's weight lambda
    shape: list[int] | None = None  # (rows, cols) of the matrix model, nuclear norm only

    def __post_init__(self):
        # Regularizer checks the kind, lam and shape (a ConfigError on bad values)
        self.psi = Regularizer(self.regularizer, float(self.lam), None if self.shape is None else tuple(self.shape))

    def validate(self) -> None:
        if self.option not in OPTIONS:
            raise unknown_choice("algorithm.option", self.option, OPTIONS)

    def setup(self, setting: Setting) -> None:
        super().setup(setting)
        if self.regularizer == "nuclear":
            rows, cols = self.psi.shape
            check(
                rows * cols == setting.dim,
                f"algorithm.shape={list(self.shape)} has {rows * cols} entries; the model has d={setting.dim}",
            )

    def init(self, x0):
        return {"x": x0.clone(), "c": torch.zeros_like(x0)}

    def client_states(self) -> dict[str, ClientStateSpec]:
        return {"c": ClientStateSpec((self.setting.dim,))}

    def broadcast(self, server: State, round_: int) -> State:
        return {"x": server["x"], "c": server["c"]}  # line 5

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, c, c_i = down["x"], down["c"], client["c"]
        y = local_sgd(  # lines 7-11: y_i <- y_i - eta_l (g_i(y_i) - c_i + c)
            work, x, lambda t, Y, G, batch: G - c_i + c, prox=self.psi.prox if self.psi.active else None
        )
        if self.option == "I":  # line 12 (i): c_i+ = g_i(x), here the full local gradient
            c_new, _ = work.full_grad(x.expand(work.num_clients, -1))
        else:  # line 12 (ii): c_i+ = c_i - c + (x - y_i) / (K_i eta_l), each client's own K_i
            # (with a shared local momentum m, K_i counts the steps' displacement: fedadmm.md §3.4)
            K = momentum_steps(work.steps.to(x.dtype), work.extras.momentum)[:, None]
            c_new = c_i - c + (x - y) / (K * work.lr)
        return {"dy": y - x, "dc": c_new - c_i}, {"c": c_new}  # lines 13-14

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        new = server_opt.apply(server_opt.sgd(self.setting.eta_g), server, weighted_mean(up["dy"], cohort.weights))  # l. 16-17
        # line 17: c = sum_i p_i c_i tracked through the cohort's changes ((|S|/N) mean for p_i = 1/N)
        return {**new, "c": server["c"] + cohort_sum(self.setting, up["dc"], cohort)}
