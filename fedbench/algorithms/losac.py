"""LoSAC, LoSAC-Prox and FedSaga (Chen, Wang, Yao, Li, Jin, Yang, "LoSAC: An Efficient Local
Stochastic Average Control Method for Federated Optimization", ACM TKDD 2023, arXiv:2112.07839).

Each client splits its data once into M fixed blocks (work.block_batch) and keeps a persistent
table Y_i [M, d] of scaled block gradients Y_i[j] = g_{i,j}(z_{i,j}) = M grad f_{i,j}(z_{i,j}).

FedSaga (Alg. 1, eqs. 7-9): SAGA inside each client on its own table; x down, dx up.
LoSAC (Alg. 2, eqs. 10-13): the SAGA running sum is a global estimate phi that the server keeps;
(x, phi) down, (dx, dphi) up. LoSAC-Prox (eq. 16): a prox step after every local step.

The printed equations are not scale-consistent (losac.md §2.2.1); `variant` selects
  paper:      eqs. (11), (13) as printed: kappa = 1, x += (1/N) sum dx, phi += (N/S) sum dphi
  consistent: eq. (10) read as SAGA:      kappa = 1/M, x += mean dx,     phi += sum dphi
(kappa scales the phi refresh). `x_agg`/`phi_agg` override the preset's server factors (only to
document that mixing them diverges, losac.md §8 target 4). There is no server step size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from fedbench.core.types import ClientStateSpec, Cohort, Setting, State
from fedbench.algorithms import server_opt
from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.common import weighted_mean
from fedbench.algorithms.prox import REGULARIZERS, Regularizer
from fedbench.algorithms.registry import register
from fedbench.core.errors import ConfigError, check, unknown_choice

VARIANTS = ("paper", "consistent")
X_AGGS = ("preset", "mean_over_S", "sum_over_N")
PHI_AGGS = ("preset", "sum", "N_over_S")
_BLOCK_TAG = 11  # the stream of block draws j (shared by every block-sampling algorithm)


def draw_blocks(work, t: int, num_blocks: int) -> Tensor:
    """j ~ Uniform{0..M-1} per client, independently at every local step t (losac.md §1.4)."""
    return work.randint(num_blocks, _BLOCK_TAG, t)


def make_regularizer(kind: str, lam: float, dim: int) -> Regularizer:
    """Psi of eq. (14): l1, or the nuclear norm of the square matrix x = vec(X)."""
    if kind not in REGULARIZERS:
        raise unknown_choice("algorithm.regularizer", kind, REGULARIZERS)
    shape = None
    if kind == "nuclear":
        side = math.isqrt(dim)
        check(side * side == dim, f"algorithm.regularizer=nuclear needs a square matrix model; d={dim} is not a square")
        shape = (side, side)
    return Regularizer(kind, lam, shape)


@dataclass
class _BlockSaga(Algorithm):
    """Shared hyperparameters: M blocks and the optional regulariser (prox after each step)."""
    lr_rows = True

    blocks: int = 5  # M: fixed local data blocks = rows of each client's table
    regularizer: str = "none"  # none | l1 | nuclear (Psi of eq. 14)
    lam: float = 0.0  # lambda of Psi

    def validate(self) -> None:
        check(isinstance(self.blocks, int) and self.blocks >= 1, f"algorithm.blocks must be an integer >= 1, got {self.blocks!r}")
        check(self.lam >= 0, f"algorithm.lam must be >= 0, got {self.lam}")
        if self.regularizer not in REGULARIZERS:
            raise unknown_choice("algorithm.regularizer", self.regularizer, REGULARIZERS)

    def setup(self, setting: Setting) -> None:
        super().setup(setting)
        self.reg = make_regularizer(self.regularizer, self.lam, setting.dim)
        small = int(setting.client_sizes.min())
        if small < self.blocks:
            raise ConfigError(f"algorithm.blocks={self.blocks} exceeds the smallest client's {small} samples")

    def client_states(self) -> dict[str, ClientStateSpec]:
        return {"Y": ClientStateSpec((self.blocks, self.setting.dim), 0.0)}  # zero init (§2.2.2)

    def _step(self, X: Tensor, V: Tensor, lr: float) -> Tensor:
        X_new = X - lr * V
        return self.reg.prox(X_new, lr) if self.reg.active else X_new  # eq. (16)


@register("fedsaga", "FedSaga (LoSAC paper Alg. 1): SAGA over M local blocks inside each client")
@dataclass
class FedSaga(_BlockSaga):
    sends = (1, 1)  # per client and round, in d-vectors: x down, dx up (losac.md §2.1)
    x_agg: str = "mean_over_S"  # mean_over_S: x += eta_g * mean dx (as FedAvg) | sum_over_N: x += (1/N) sum dx (Alg. 1)

    def validate(self) -> None:
        super().validate()
        if self.x_agg not in X_AGGS[1:]:
            raise unknown_choice("algorithm.x_agg", self.x_agg, X_AGGS[1:])

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, M = down["x"], self.blocks
        Y = client["Y"].clone()
        Y_mean = Y.mean(1)  # phi~_i / n_i of eq. (9), kept as the mean of the scaled table
        X = x.expand(work.num_clients, -1).clone()
        rows = torch.arange(work.num_clients, device=X.device)
        for t in range(work.max_steps):
            j = draw_blocks(work, t, M)
            G, _ = work.grad(X, work.block_batch(j, M))  # g_{i,j}(x_i)
            y_old = Y[rows, j]
            X = work.masked(t, self._step(X, G - y_old + Y_mean, work.lr), X)  # eq. (9)
            Y_mean = work.masked(t, Y_mean + (G - y_old) / M, Y_mean)
            Y[rows, j] = work.masked(t, G, y_old)
        return {"dx": X - x}, {"Y": Y}

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        if self.x_agg == "sum_over_N":
            return {**server, "x": server["x"] + up["dx"].sum(0) / self.setting.num_clients}
        return server_opt.apply(server_opt.sgd(self.setting.eta_g), server, weighted_mean(up["dx"], cohort.weights))


@register("losac", "LoSAC / LoSAC-Prox (Alg. 2, eqs. 10-16): SAGA with a global gradient estimate phi")
@dataclass
class LoSAC(_BlockSaga):
    sends = (2, 2)  # per client and round, in d-vectors: (x, phi) down, (dx_i, dphi_i) up (losac.md §2.2.3)
    variant: str = "consistent"  # paper (eqs. 11, 13 as printed) | consistent (eq. 10 as SAGA)
    phi_refresh_before_step: bool = False  # Fig. 1's order: refresh phi_i before the x-step
    x_agg: str = "preset"  # preset | mean_over_S (1/S) | sum_over_N (1/N)
    phi_agg: str = "preset"  # preset | sum (1) | N_over_S (N/S)

    def validate(self) -> None:
        super().validate()
        for key, value, valid in (("variant", self.variant, VARIANTS), ("x_agg", self.x_agg, X_AGGS),
                                  ("phi_agg", self.phi_agg, PHI_AGGS)):
            if value not in valid:
                raise unknown_choice(f"algorithm.{key}", value, valid)

    def init(self, x0: Tensor) -> State:
        return {"x": x0.clone(), "phi": torch.zeros_like(x0)}  # phi^0 = 0 (required by `paper`)

    def broadcast(self, server: State, round_: int) -> State:
        return {"x": server["x"], "phi": server["phi"]}

    @property
    def kappa(self) -> float:
        return 1.0 if self.variant == "paper" else 1.0 / self.blocks

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, phi, M, N = down["x"], down["phi"], self.blocks, self.setting.num_clients
        Y = client["Y"].clone()
        X = x.expand(work.num_clients, -1).clone()
        Phi = phi.expand(work.num_clients, -1).clone()
        rows = torch.arange(work.num_clients, device=X.device)
        for t in range(work.max_steps):
            j = draw_blocks(work, t, M)
            G, _ = work.grad(X, work.block_batch(j, M))  # g_{i,j}(x_i^-): one block gradient per step
            y_old = Y[rows, j]
            Phi_new = Phi + self.kappa * (G - y_old)  # phi_i <- phi_i - y_{i,j} + g (eq. 11)
            V = (Phi_new if self.phi_refresh_before_step else Phi) / N - y_old + G  # eq. (11)
            X = work.masked(t, self._step(X, V, work.lr), X)
            Phi = work.masked(t, Phi_new, Phi)
            Y[rows, j] = work.masked(t, G, y_old)  # y_{i,j} <- g_{i,j}(x_i^-)
        return {"dx": X - x, "dphi": Phi - phi}, {"Y": Y}  # eq. (12)

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        N, S = self.setting.num_clients, len(cohort.ids)
        x_agg = self.x_agg if self.x_agg != "preset" else ("sum_over_N" if self.variant == "paper" else "mean_over_S")
        phi_agg = self.phi_agg if self.phi_agg != "preset" else ("N_over_S" if self.variant == "paper" else "sum")
        if x_agg == "sum_over_N":
            x = server["x"] + up["dx"].sum(0) / N  # eq. (13)
        else:
            x = server["x"] + weighted_mean(up["dx"], cohort.weights)
        b_phi = N / S if phi_agg == "N_over_S" else 1.0  # eq. (13): N/S
        return {**server, "x": x, "phi": server["phi"] + b_phi * up["dphi"].sum(0)}
