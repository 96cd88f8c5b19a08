"""FedSSO's server: safeguarded BFGS on the averaged gradient, as a server optimiser (server_opt.py).

Ma et al., "FedSSO", AAAI 2023 (arXiv:2206.09576), Alg. 1; spec papers/fedsso.md. With g_k the
server's gradient estimate (the pseudo-gradient Delta = -g_k is what `update` receives):
  s = x_k - x_{k-1},  y = g_k - g_{k-1},  cur = y^T s
  cur <- 2 |y|^2 / (lambda + Lambda) unless lambda < |y|^2 / cur < Lambda  (Alg. 1 l. 4-5)
  B_k = B_{k-1} + y y^T / cur - (B s)(B s)^T / (s^T B s)                  (eq. 10), B_k = I when k % R == 0
  x_{k+1} = x_k - eta B_k^{-1} g_k                                        (Alg. 1)
B_k^{-1} g is computed exactly by one of three backends (spec §2.5): `lbfgs_exact` (two-loop
recursion over the rescaled pairs (s, y~ = (y^T s / cur) y), H0 = I), `dense_inverse` (the BFGS
H-form of the same matrix) and `dense_solve` (store B, solve). `ref_v1_dfp` and `ref_v2_lbfgs` are
the authors' code (spec §2.8). The state (x_{k-1}, g_{k-1}, the pairs or the matrix) is float64
(spec §2.5) and sits in the server dict; `update` needs x (optax's params) for s, and the optimiser
is built for the round k it steps (the reset B_k = I and the authors' first step depend on k).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedbench.algorithms.server_opt import OptState, ServerOptimizer

BACKENDS = ("lbfgs_exact", "dense_inverse", "dense_solve", "ref_v1_dfp", "ref_v2_lbfgs")
LIMITED_MEMORY = ("lbfgs_exact", "ref_v2_lbfgs")
FIRST_ROUND = ("skip", "reference_code")
QN = torch.float64
# d x d matrices alive at once in a dense update: the server's, and its three temporaries (outer products, sums)
DENSE_COPIES = 4


def two_loop(S: Tensor, Y: Tensor, rho: Tensor, g: Tensor, h0: float | Tensor = 1.0) -> Tensor:
    """H g for the BFGS inverse built from pairs (S[j], Y[j]), rho[j] = 1/(Y[j]^T S[j]), H0 = h0 I
    (Nocedal & Wright, Alg. 7.4)."""
    q = g.clone()
    a = []
    for j in reversed(range(S.shape[0])):
        a.append(rho[j] * (S[j] @ q))
        q = q - a[-1] * Y[j]
    r = h0 * q
    for j, aj in zip(range(S.shape[0]), reversed(a)):
        r = r + (aj - rho[j] * (Y[j] @ r)) * S[j]
    return r


def safeguarded_curvature(yy: Tensor, ys: Tensor, lower: float, upper: float) -> tuple[Tensor, bool]:
    """Alg. 1 l. 4-5: keep cur = y^T s if lambda < |y|^2 / cur < Lambda, else force 2|y|^2/(lambda+Lambda)."""
    if ys > 0 and lower < yy / ys < upper:
        return ys, False
    return 2 * yy / (lower + upper), True


@dataclass(frozen=True)
class QuasiNewton:
    """The hyperparameters of FedSSO's server (algorithm.* of conf/algorithm/fedsso.yaml)."""

    backend: str = "lbfgs_exact"
    curvature_lower: float = 1e-4
    curvature_upper: float = 9999.0
    reset_period: int = 200
    history_size: int | None = None
    first_round: str = "skip"
    s_scale: float = 1.0
    min_abs_cos: float = 0.0

    @property
    def dense(self) -> bool:
        return self.backend in ("dense_inverse", "dense_solve", "ref_v1_dfp")

    def optimizer(self, lr: float, k: int) -> ServerOptimizer:
        """The server optimiser with step size eta = lr, for round k = 1, 2, ..."""

        def init(x0: Tensor) -> OptState:
            zero = torch.zeros_like(x0, dtype=QN)
            # reference code: x_0 = g_0 = 0 make a pair at round 1 (spec §2.4)
            has_prev = 1.0 if self.first_round == "reference_code" else 0.0
            # flags and counters in QN too: torch.tensor(a Python float) would be float32
            return {"x_prev": zero, "g_prev": zero.clone(), "has_prev": zero.new_tensor(has_prev),
                    "qn_skipped": zero.new_zeros(()), "qn_forced": zero.new_zeros(()),
                    **self.empty_memory(x0)}

        def update(delta: Tensor, state: OptState, x: Tensor) -> tuple[Tensor, OptState]:
            g = -delta
            new = {key: state[key] for key in self.state_keys()}
            if self.reset_period and k % self.reset_period == 0:  # Alg. 1 l. 1: B_k = I
                new.update(self.empty_memory(x))
            elif state["has_prev"] > 0:
                s = self.s_scale * (x.to(QN) - state["x_prev"])
                self.add_pair(new, s, g - state["g_prev"])
            p = self.inverse_times(new, g, first=k == 1)
            new.update({"x_prev": x.to(QN), "g_prev": g, "has_prev": g.new_ones((), dtype=QN)})
            return -(lr * p), new

        return ServerOptimizer(init, update)

    def check_fits(self, dim: int, device: torch.device) -> None:
        """A dense backend's d x d matrix, with its update's temporaries, must fit in the memory of the device that
        holds the server state: a conv net's d = 188,810 asks for 285 GB a matrix, which failed (or swapped) at
        round 1."""
        if not self.dense:
            return
        from fedbench.core.errors import ConfigError, size_text
        from fedbench.core.memory import available_bytes

        need = DENSE_COPIES * dim * dim * torch.empty((), dtype=QN).element_size()
        free = available_bytes(device)
        if need > free:
            raise ConfigError(f"algorithm.backend={self.backend} keeps a dense d x d float64 matrix, d = {dim:,} parameters: "
                              f"its update holds {DENSE_COPIES} at once, {size_text(need)}, and {device.type} has "
                              f"{size_text(free)} available; use algorithm.backend=lbfgs_exact, which keeps d-vector pairs "
                              "in its place (the steps of dense_inverse and dense_solve), or a smaller model")

    def state_keys(self) -> tuple[str, ...]:
        memory = ("qn_matrix",) if self.dense else ("qn_s", "qn_y", "qn_rho")
        return ("x_prev", "g_prev", "has_prev", "qn_skipped", "qn_forced", *memory)

    def empty_memory(self, x: Tensor) -> OptState:
        d = x.numel()
        if self.dense:  # B (dense_solve) or H = B^{-1} (dense_inverse, DFP's D), B_0 = I
            return {"qn_matrix": torch.eye(d, dtype=QN, device=x.device)}
        return {
            "qn_s": x.new_zeros(0, d, dtype=QN),
            "qn_y": x.new_zeros(0, d, dtype=QN),
            "qn_rho": x.new_zeros(0, dtype=QN),
        }

    def add_pair(self, state: OptState, s: Tensor, y: Tensor) -> None:
        """Fold the pair (s, y) into the memory, with the backend's curvature safeguard."""
        lo, hi = self.curvature_lower, self.curvature_upper
        ys, yy, ss = y @ s, y @ y, s @ s
        if self.backend == "ref_v1_dfp":  # test on s^T y itself; DFP update of D ~ B^{-1}
            D = state["qn_matrix"]
            cur = ys if lo < ys < hi else 2 * ss / (lo + hi)
            state["qn_forced"] = state["qn_forced"] + float(not lo < ys < hi)
            Dy = D @ y
            yDy = y @ Dy
            term1 = torch.outer(s, s) / cur if cur > 0 else 0.0
            term2 = torch.outer(Dy, Dy) / yDy if yDy != 0 else 0.0
            state["qn_matrix"] = D + term1 - term2
            return
        if self.backend == "ref_v2_lbfgs":  # test on |s|^2 / s^T y; fallback replaces s by a scaled y
            if not yy > 0:  # y = 0 leaves no usable pair
                state["qn_skipped"] = state["qn_skipped"] + 1
                return
            if not (ys != 0 and lo < ss / ys < hi):
                s = 2 * y / (lo + hi)
                ys = y @ s
                state["qn_forced"] = state["qn_forced"] + 1
            self._append(state, s, y, 1 / ys)
            return
        # paper formula; guard against degenerate pairs (spec §2.4)
        if not (yy > 0 and ss > 0 and torch.isfinite(ys) and ys.abs() > self.min_abs_cos * yy.sqrt() * ss.sqrt()):
            state["qn_skipped"] = state["qn_skipped"] + 1
            return
        c, forced = safeguarded_curvature(yy, ys, lo, hi)
        state["qn_forced"] = state["qn_forced"] + float(forced)
        if self.backend == "lbfgs_exact":  # B_k = BFGS with (s, y~), y~ = (y^T s / c) y: rho~ = c / (y^T s)^2
            self._append(state, s, (ys / c) * y, c / ys**2)
        elif self.backend == "dense_inverse":  # exact inverse of eq. 10, u = H y, rho = 1/(y^T s)
            H = state["qn_matrix"]
            u, rho = H @ y, 1 / ys
            state["qn_matrix"] = H - rho * (torch.outer(s, u) + torch.outer(u, s)) + rho**2 * (y @ u + c) * torch.outer(s, s)
        else:  # dense_solve: eq. 10 itself
            B = state["qn_matrix"]
            Bs = B @ s
            state["qn_matrix"] = B + torch.outer(y, y) / c - torch.outer(Bs, Bs) / (s @ Bs)

    def _append(self, state: OptState, s: Tensor, y: Tensor, rho: Tensor) -> None:
        S, Y, R = (torch.cat([state[k], v.reshape(1, *state[k].shape[1:])]) for k, v in
                   (("qn_s", s), ("qn_y", y), ("qn_rho", rho)))
        if self.history_size is not None:  # true limited memory: an approximation of B_k^{-1}
            S, Y, R = S[-self.history_size:], Y[-self.history_size:], R[-self.history_size:]
        state.update(qn_s=S, qn_y=Y, qn_rho=R)

    def inverse_times(self, state: OptState, g: Tensor, first: bool) -> Tensor:
        """B_k^{-1} g (the backend's approximation of it for the authors' code)."""
        if self.backend == "dense_solve":
            return torch.linalg.solve(state["qn_matrix"], g)
        if self.dense:
            return state["qn_matrix"] @ g
        S, Y, rho = state["qn_s"], state["qn_y"], state["qn_rho"]
        if self.backend == "ref_v2_lbfgs":
            if first:  # torch.optim.LBFGS's first step: t = min(1, 1/|g|_1)
                return min(1.0, 1.0 / float(g.abs().sum())) * g
            h0 = 1 / (rho[-1] * (Y[-1] @ Y[-1])) if len(rho) else 1.0  # gamma = s^T y / y^T y
            return two_loop(S, Y, rho, g, h0)
        return two_loop(S, Y, rho, g)
