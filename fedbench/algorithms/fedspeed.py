"""FedSpeed and FedSpeed-Ing.

Sun, Shen, Huang, Ding, Tao, "FedSpeed: Larger Local Interval, Less Communication Round, and
Higher Generalization Accuracy", ICLR 2023 (arXiv:2302.10429); Y. Sun, "An Efficient Federated
Learning Method Enables Larger Local Intervals", MPhil thesis, Univ. of Sydney 2023 (Alg. 2, and
Alg. 3 for FedSpeed-Ing). Equation numbers are the thesis's; spec: papers/fedspeed.md.

Each client keeps a prox-correction term. We store it in the official code's h-form,
h_i = -lambda * g_hat_i (the sum of the client's past local offsets), with mu = 1/lambda (A1):

  local step (Alg. 2 l. 11)   x <- x - lr * (clip(g~) + wd x + mu h_i + mu (x - x^t))
                               (wd and clip: the run's shared extras, top-level weight_decay and
                               grad_clip, which every method's local step takes: spec §3.0)
  perturbation (eqs. 3.8-3.12) g1 = grad(x; xi), x' = x + r g1, g2 = grad(x'; xi) on the SAME
                               batch, g~ = (1 - alpha) g1 + alpha g2, r = rho0 / ||g1|| (normalized)
  correction (Alg. 2 l. 13)    h_i <- h_i + (x_K - x^t)             (= -lambda g_hat_i^t)
  upload (Alg. 2 l. 14)        x_hat_i = x_K + h_i
  server (Alg. 2 l. 16)        'participating': x^{t+1} = mean_S x_hat_i
                               'all' (official code, default, A2): mean_S x_K + (1/M) sum_j h_j

With rho0 = 0 (or alpha = 0) and server 'all' this is FedDyn (spec §3.6).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedbench.core.types import ClientStateSpec, Cohort, State
from fedbench.algorithms.base import EXTRAS, Algorithm
from fedbench.algorithms.common import local_sgd, weighted_mean
from fedbench.algorithms.registry import register
from fedbench.core.errors import check, unknown_choice

RHO_MODES = ("normalized", "raw")
CLIP_MODES = ("data_grad", "official")
SERVER_MODES = ("all", "participating")
ING_ANCHORS = ("x", "x_tilde")


@register("fedspeed", "FedSpeed: prox + prox-correction (FedDyn-like) + SAM-style gradient perturbation")
@dataclass
class FedSpeed(Algorithm):
    sends = (1, 1)  # per client and round, in d-vectors: x down, x_hat_i (or Delta_i, the same size) up (fedspeed.md §2.2, l. 124)
    lr_rows = True
    local_extras = EXTRAS  # conf/algorithm/fedspeed.yaml sets the spec's weight_decay 1e-3 and grad_clip 10
    mu: float = 0.1
    rho0: float = 0.1
    rho_mode: str = "normalized"
    alpha: float = 1.0
    clip_mode: str = "data_grad"  # what the shared grad_clip clips: g~ | g~ + mu (h_i - x^t) (official code, A6)
    server_correction_avg: str = "all"
    use_correction: bool = True
    use_perturbation: bool = True

    def validate(self) -> None:
        check(self.mu > 0, f"algorithm.mu (= 1/lambda) must be > 0, got {self.mu}")
        check(self.rho0 >= 0, f"algorithm.rho0 must be >= 0, got {self.rho0}")
        check(0 <= self.alpha <= 1, f"algorithm.alpha must lie in [0, 1], got {self.alpha}")
        for key, value, choices in (
            ("rho_mode", self.rho_mode, RHO_MODES),
            ("clip_mode", self.clip_mode, CLIP_MODES),
            ("server_correction_avg", self.server_correction_avg, SERVER_MODES),
        ):
            if value not in choices:
                raise unknown_choice(f"algorithm.{key}", value, choices)

    @property
    def perturbs(self) -> bool:
        return self.use_perturbation and self.rho0 > 0 and self.alpha > 0

    # -- state ---------------------------------------------------------------------------------
    def init(self, x0: Tensor) -> State:
        return {"x": x0.clone(), "h_mean": torch.zeros_like(x0)}  # h_mean = (1/M) sum_j h_j

    def client_states(self) -> dict[str, ClientStateSpec]:
        return {"h": ClientStateSpec((self.setting.dim,))} if self.use_correction else {}

    # -- client --------------------------------------------------------------------------------
    def perturbed_grad(self, work, X: Tensor, G: Tensor, batch) -> Tensor:
        """g~ of eqs. 3.8-3.12: the ascent step and the second gradient on the same minibatch."""
        if not self.perturbs:
            return G
        if self.rho_mode == "normalized":  # rho = rho0 / ||g1|| (thesis §4.3; eps 1e-7 as the code)
            r = self.rho0 / (G.norm(dim=1, keepdim=True) + 1e-7)
        else:  # raw Alg. 2: x' = x + rho g1
            r = self.rho0
        G2, _ = work.grad(X + r * G, batch)
        return G2 if self.alpha == 1 else (1 - self.alpha) * G + self.alpha * G2

    def local_train(self, work, x: Tensor, anchor: Tensor, h: Tensor | None) -> Tensor:
        """K local steps of Alg. 2 l. 5-11 from x with prox anchor `anchor` and correction h; the
        shared extras (common.local_sgd) clip the data direction and add wd x."""
        mu = self.mu
        linear = 0.0 if h is None else mu * h  # mu h_i = -g_hat_i

        def perturbed(X, G, batch):
            return self.perturbed_grad(work, X, G, batch)

        if self.clip_mode == "official":  # A6: the code clips g~ + mu (h_i - x^t); (wd + mu) x unclipped
            return local_sgd(work, x, lambda t, X, G, batch: G + mu * X,
                             data_direction=lambda X, G, batch: perturbed(X, G, batch) + linear - mu * anchor)
        return local_sgd(work, x, lambda t, X, G, batch: G + linear + mu * (X - anchor), data_direction=perturbed)

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x = down["x"]
        h = client.get("h")
        X = self.local_train(work, x, x, h)
        return self._upload(X - x, X, h)

    def _upload(self, offset: Tensor, X: Tensor, h: Tensor | None) -> tuple[State, State]:
        """Alg. 2 l. 13-14: h_i += Delta_i; in 'all' mode only Delta_i goes up (the server knows x)."""
        if h is None:
            return {"delta": offset}, {}
        h_new = h + offset
        if self.server_correction_avg == "all":
            return {"delta": offset}, {"h": h_new}
        return {"x_hat": X + h_new}, {"h": h_new}

    # -- server --------------------------------------------------------------------------------
    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        return self._aggregate(server, up, cohort, server["x"])

    def _aggregate(self, server: State, up: State, cohort: Cohort, ref: Tensor) -> State:
        """`ref` is the point the offsets were taken from (x^t, or x~^t for FedSpeed-Ing)."""
        if "x_hat" in up:  # Alg. 2 l. 16, literal
            return {**server, "x": weighted_mean(up["x_hat"], cohort.weights)}
        mean_xk = ref + weighted_mean(up["delta"], cohort.weights)
        if not self.use_correction:
            return {**server, "x": mean_xk}
        h_mean = server["h_mean"] + up["delta"].sum(0) / self.setting.num_clients
        return {**server, "x": mean_xk + h_mean, "h_mean": h_mean}


@register("fedspeed_ing", "FedSpeed-Ing: FedSpeed with inertial extrapolation of the anchor and the correction")
@dataclass
class FedSpeedIng(FedSpeed):
    """Thesis Alg. 3 in the reading of spec §2.9 (A7):

    x~^{t+1} = x^{t+1} + zeta (x^{t+1} - x^t)             (l. 18; the prox anchor of round t+1)
    h'_i = h_i^t + zeta (h_i^t - h_i^{t-1})               (l. 14; the correction used next time)
    local step: x <- x - lr (g~ + wd x + mu h'_i + mu (x - x~^t)), from x^t (or x~^t)
    """
    sends = (2, 1)  # per client and round, in d-vectors: x^t and the anchor x~^t down (fedspeed.md §2.9, l. 11), x_hat_i up

    zeta: float = 0.1
    ing_init_from_lookahead: bool = False
    ing_correction_anchor: str = "x"

    def validate(self) -> None:
        super().validate()
        check(self.zeta >= 0, f"algorithm.zeta must be >= 0, got {self.zeta}")
        if self.ing_correction_anchor not in ING_ANCHORS:
            raise unknown_choice("algorithm.ing_correction_anchor", self.ing_correction_anchor, ING_ANCHORS)

    def init(self, x0: Tensor) -> State:
        return {**super().init(x0), "x_tilde": x0.clone()}

    def client_states(self) -> dict[str, ClientStateSpec]:
        d = (self.setting.dim,)
        return {"h": ClientStateSpec(d), "h_ing": ClientStateSpec(d)} if self.use_correction else {}

    def broadcast(self, server: State, round_: int) -> State:
        return {"x": server["x"], "x_tilde": server["x_tilde"]}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, x_tilde = down["x"], down["x_tilde"]
        start = x_tilde if self.ing_init_from_lookahead else x  # l. 4
        X = self.local_train(work, start, x_tilde, client.get("h_ing"))  # l. 11
        ref = x_tilde if self.ing_correction_anchor == "x_tilde" else x  # l. 13
        offset = X - ref
        up, new = self._upload(offset, X, client.get("h"))
        if new:
            new["h_ing"] = new["h"] + self.zeta * offset  # l. 14, h-form
        return up, new

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        ref = server["x_tilde"] if self.ing_correction_anchor == "x_tilde" else server["x"]
        new = self._aggregate(server, up, cohort, ref)
        new["x_tilde"] = new["x"] + self.zeta * (new["x"] - server["x"])  # l. 18
        return new
