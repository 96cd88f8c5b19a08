"""FedSSO: FedAvg's clients and a quasi-Newton server optimiser.

Ma, Bao, Jiang, Liu, Jiang, Yan, Liu, Pan, "FedSSO: A Federated Server-Side Second-Order
Optimization Algorithm", AAAI 2023 (arXiv:2206.09576). Spec: papers/fedsso.md.

Clients run FedAvg's local SGD (alpha = eta_l, tau steps) and upload x_i - x_k. The server forms
  v_k = sum_i p_i x_i,  g_k = (x_k - v_k) / (alpha tau)                 (eqs. 8-9, "Lighthouse" gradient)
and steps x_{k+1} = x_k - eta B_k^{-1} g_k (Alg. 1, eta = eta_g) with the safeguarded BFGS server
of quasi_newton.py (eq. 10; `backend` picks how B_k^{-1} g is computed, or the authors' code).
With unequal local work each client's offset is divided by its own alpha tau_i, so g_k stays the
average of the gradients taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.core.types import Cohort, Setting, State
from fedbench.algorithms import server_opt
from fedbench.algorithms.base import EXTRAS, Algorithm
from fedbench.algorithms.common import local_sgd, momentum_steps, weighted_mean
from fedbench.algorithms.quasi_newton import BACKENDS, FIRST_ROUND, LIMITED_MEMORY, QN, QuasiNewton
from fedbench.algorithms.registry import register
from fedbench.algorithms.server_opt import ServerOptimizer
from fedbench.core.errors import check, unknown_choice

GRADIENT_SCALES = ("alpha_tau", "alpha")


@register("fedsso", "FedSSO: FedAvg clients, server quasi-Newton (safeguarded BFGS) step on the average gradient")
@dataclass
class FedSSO(Algorithm):
    sends = (1, 1)  # per client and round, in d-vectors: x_k down, x_i up (fedsso.md §2.1)
    local_extras = EXTRAS
    curvature_lower: float = 1e-4
    curvature_upper: float = 9999.0
    reset_period: int = 200
    backend: str = "lbfgs_exact"
    history_size: int | None = None
    first_round: str = "skip"
    gradient_scale: str = "alpha_tau"
    s_scale: float = 1.0
    min_abs_cos: float = 0.0

    metadata_keys = ("scale",)

    def validate(self) -> None:
        check(0 <= self.curvature_lower < self.curvature_upper,
              f"need 0 <= algorithm.curvature_lower < algorithm.curvature_upper, got "
              f"{self.curvature_lower} and {self.curvature_upper}")
        check(isinstance(self.reset_period, int) and self.reset_period >= 0,
              f"algorithm.reset_period must be an integer >= 0 (0 = never), got {self.reset_period!r}")
        check(self.history_size is None or (isinstance(self.history_size, int) and self.history_size >= 1),
              f"algorithm.history_size must be null (unlimited) or an integer >= 1, got {self.history_size!r}")
        check(self.s_scale > 0, f"algorithm.s_scale must be > 0, got {self.s_scale}")
        check(0 <= self.min_abs_cos < 1, f"algorithm.min_abs_cos must lie in [0, 1), got {self.min_abs_cos}")
        for key, value, choices in (
            ("backend", self.backend, BACKENDS),
            ("first_round", self.first_round, FIRST_ROUND),
            ("gradient_scale", self.gradient_scale, GRADIENT_SCALES),
        ):
            if value not in choices:
                raise unknown_choice(f"algorithm.{key}", value, choices)
        check(self.history_size is None or self.backend in LIMITED_MEMORY,
              f"algorithm.history_size needs a limited-memory backend ({', '.join(LIMITED_MEMORY)}), got {self.backend!r}")

    def setup(self, setting: Setting) -> None:
        super().setup(setting)
        self.quasi_newton.check_fits(setting.dim, setting.device)

    @property
    def quasi_newton(self) -> QuasiNewton:
        return QuasiNewton(self.backend, self.curvature_lower, self.curvature_upper, self.reset_period,
                           self.history_size, self.first_round, self.s_scale, self.min_abs_cos)

    def optimizer(self, k: int) -> ServerOptimizer:
        return self.quasi_newton.optimizer(self.setting.eta_g, k)

    def init(self, x0):
        return {"x": x0.clone(), **self.optimizer(0).init(x0)}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"]
        steps = momentum_steps(work.steps.to(x.dtype), work.extras.momentum) if self.gradient_scale == "alpha_tau" \
            else torch.ones_like(work.sizes, dtype=x.dtype)
        return {"delta": local_sgd(work, x) - x, "scale": work.lr * steps}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        # eq. 9: -g_k = (v_k - x_k)/(alpha tau) = sum_i p_i delta_i / (alpha tau_i), the pseudo-gradient
        delta = weighted_mean(up["delta"].to(QN) / up["scale"].to(QN)[:, None], cohort.weights)
        return server_opt.apply(self.optimizer(cohort.round + 1), server, delta)

    def metrics(self, server: State) -> dict[str, float]:
        out = {"qn_skipped": float(server["qn_skipped"]), "qn_forced": float(server["qn_forced"])}
        if not self.quasi_newton.dense:
            out["qn_pairs"] = float(server["qn_s"].shape[0])
        return out
