"""FedNL: Newton learning (Safaryan, Islamov, Qian, Richtarik, "FedNL: Making Newton-Type Methods
Applicable to Federated Learning", ICML 2022, arXiv:2106.02969), Algorithm 1 with Option 1 and the
identity compressor, as FedSSO's baseline (papers/fedsso.md §3.5).

Client i keeps a Hessian estimate H_i (d x d), H_i^0 = grad^2 f_i(x^0). Round k:
  client: S_i = C(grad^2 f_i(x^k) - H_i);  H_i <- H_i + alpha_H S_i;  send grad f_i(x^k), S_i
  server: x^{k+1} = x^k - [H^k]_mu^{-1} grad f(x^k)      ([A]_mu: eigenvalues clamped below at mu)
          H^{k+1} = H^k + alpha_H sum_i p_i S_i
In round 0 the clients send H_i^0 instead of S_i (S_i^0 = 0) so that the server holds H^0.
Full participation only (partial participation is the separate FedNL-PP); d^2 floats per client.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedbench.core.types import ClientStateSpec, Cohort, Setting, State
from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.common import weighted_mean
from fedbench.algorithms.registry import register
from fedbench.core.errors import check

MAX_HESSIAN_FLOATS = 2e8  # N d^2 floats of client Hessians (1.6 GB in float64)


def local_hessians(work, X: Tensor) -> Tensor:
    """[s, d, d]: the exact Hessian of each client's f_i at X [s, d], by forward-over-reverse
    differentiation of the local gradient (one tangent per coordinate, shared by all clients:
    client blocks are independent)."""
    s, d = X.shape
    eye = torch.eye(d, dtype=X.dtype, device=X.device)

    def column(e: Tensor) -> Tensor:
        return torch.func.jvp(lambda Z: work.full_grad(Z)[0], (X,), (e.expand(s, d),))[1]

    return torch.func.vmap(column)(eye).permute(1, 0, 2)  # [d, s, d] -> [s, d, d]; symmetric


def project(H: Tensor, mu: float) -> Tensor:
    """[A]_mu: symmetrise and clamp the eigenvalues below at mu."""
    evals, evecs = torch.linalg.eigh((H + H.T) / 2)
    return (evecs * evals.clamp(min=mu)) @ evecs.T


@register("fednl", "FedNL: Newton steps with learned client Hessians (Option 1, no compression)")
@dataclass
class FedNL(Algorithm):
    hessian_lr: float = 1.0
    mu_p: float = 1e-3

    @classmethod
    def floats_per_client(cls, dim: int) -> tuple[int, int]:
        return dim, dim + dim * dim  # x down; grad f_i(x) and the d x d Hessian difference S_i up (fedsso.md §3.5)

    def validate(self) -> None:
        check(0 < self.hessian_lr <= 1, f"algorithm.hessian_lr (alpha_H) must lie in (0, 1], got {self.hessian_lr}")
        check(self.mu_p > 0, f"algorithm.mu_p must be > 0, got {self.mu_p}")

    def setup(self, setting: Setting) -> None:
        super().setup(setting)
        check(setting.clients_per_round == setting.num_clients,
              f"fednl needs full participation (clients_per_round = num_clients = {setting.num_clients}), "
              f"got clients_per_round={setting.clients_per_round}")
        floats = setting.num_clients * setting.dim**2
        check(floats <= MAX_HESSIAN_FLOATS,
              f"fednl keeps a d x d Hessian per client: N d^2 = {floats:.3g} floats for d={setting.dim}; "
              f"the limit is {MAX_HESSIAN_FLOATS:.0e} (use a smaller model)")

    def init(self, x0: Tensor) -> State:
        d = x0.numel()
        return {"x": x0.clone(), "H": x0.new_zeros(d, d)}

    def client_states(self) -> dict[str, ClientStateSpec]:
        d = self.setting.dim
        return {"H": ClientStateSpec((d, d))}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        X = down["x"].expand(work.num_clients, -1)
        G, _ = work.full_grad(X)
        hess = local_hessians(work, X)
        if work.round == 0:  # H_i^0 = grad^2 f_i(x^0)
            return {"grad": G, "H0": hess}, {"H": hess}
        S = hess - client["H"]
        return {"grad": G, "S": S}, {"H": client["H"] + self.hessian_lr * S}

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        w = cohort.weights
        H = weighted_mean(up["H0"], w) if "H0" in up else server["H"]
        g = weighted_mean(up["grad"], w)
        x = server["x"] - torch.linalg.solve(project(H, self.mu_p), g)
        if "S" in up:
            H = H + self.hessian_lr * weighted_mean(up["S"], w)
        return {**server, "x": x, "H": H}
