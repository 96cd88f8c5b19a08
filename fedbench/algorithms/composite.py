"""Composite federated optimisation, min_x F(x) = f(x) + g(x) with f = sum_i p_i f_i smooth and g
convex, possibly non-smooth (l1 or nuclear norm, prox.Regularizer): fedcomp and its baselines.

fedcomp: Zhang, Hu, Johansson, "Non-convex composite federated learning with heterogeneous data",
  arXiv:2502.03958 (journal version of arXiv:2309.01795). Algorithm 1 as reconstructed in
  papers/composite.md §2.3 (lines cited as "L9"); called `ProxDrift` in a third-party R implementation.
FedMid, FedDA: Yuan, Zaheer, Reddi, "Federated Composite Optimization", ICML 2021 (arXiv:2011.08474),
  the rules of their code hongliny/FCO-ICML21 (composite.md §3.1-3.2).
Fast-FedDA: Bao, Crawshaw, Luo, Liu, "Fast Composite Optimization and Statistical Recovery in Federated
  Learning", ICML 2022 (arXiv:2207.08204), the rule of their MATLAB code LassoRun.m (composite.md §3.3).

Local step size eta = eta_l, server step size eta_g (FedDA's and FedMid's eta_c, eta_s). Each logs the
relative stationarity error of composite.md §4.1 as `stationarity`, with the objective F and nnz.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from fedbench.core.types import ClientStateSpec, Cohort, Setting, State
from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.common import local_sgd, lr_per_client, weighted_mean
from fedbench.algorithms.prox import Regularizer
from fedbench.algorithms.registry import register
from fedbench.core.errors import ConfigError, check, unknown_choice


def _common_value(values: Tensor, what: str) -> Tensor:
    """The value all clients uploaded; the methods' server prox parameters assume equal local work."""
    if not bool((values == values[0]).all()):
        raise ConfigError(f"{what} differs across clients ({values.min().item()} to {values.max().item()}): "
                          "the composite methods need the same number of local steps on every client "
                          "(set local_steps, or use equal client sizes)")
    return values[0]


@dataclass
class CompositeAlgorithm(Algorithm):
    """Shared by the four methods: the regulariser g and the stationarity metric of composite.md §4.1,

        e_r = ||x^r - P_{alpha g}(x^r - alpha grad f(x^r))|| / (the same at x^0),

    evaluated with the exact gradient of the whole objective every `stationarity_every` rounds."""

    regularizer: dict = field(default_factory=lambda: {"kind": "l1", "lam": 0.1})
    stationarity_alpha: float = 1.0
    stationarity_every: int = 1

    def __post_init__(self):
        check(isinstance(self.regularizer, dict), f"algorithm.regularizer must be a mapping, got {self.regularizer!r}")
        try:
            self.reg = Regularizer(**{k: tuple(v) if k == "shape" and v is not None else v for k, v in self.regularizer.items()})
        except TypeError as exc:
            raise ConfigError(f"algorithm.regularizer: {exc}; valid keys: kind, lam, shape") from None

    def validate(self) -> None:
        check(self.stationarity_alpha > 0, f"algorithm.stationarity_alpha must be > 0, got {self.stationarity_alpha}")
        check(self.stationarity_every >= 0, f"algorithm.stationarity_every must be >= 0 (0 = never), got {self.stationarity_every}")

    def _residual(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(||x - P_{alpha g}(x - alpha grad f(x))||, F(x))."""
        grad, f = self.setting.objective_grad(x)
        a = self.stationarity_alpha
        return torch.linalg.vector_norm(x - self.reg.prox(x - a * grad, a)), f + self.reg.value(x)

    def init_metrics(self, x0: Tensor) -> State:
        """Server-side bookkeeping of the metric: the round counter and the normaliser e at x^0."""
        state = {"round": torch.zeros((), dtype=torch.int64, device=x0.device)}
        if self.stationarity_every and self.setting.objective_grad is not None:
            state["residual0"] = self._residual(x0)[0]
        return state

    def next_round(self, server: State) -> Tensor:
        return server["round"] + 1

    def metrics(self, server: State) -> dict[str, float]:
        r = int(server["round"])
        if not self.stationarity_every or "residual0" not in server or r % self.stationarity_every:
            return {}
        x = self.model(server)
        residual, objective = self._residual(x)
        return {
            "stationarity": float(residual / server["residual0"]),
            "objective": float(objective),
            "nnz": float((x != 0).sum()),
        }


# -- fedcomp (Zhang, Hu, Johansson) -----------------------------------------------------------------

LOCAL_PROX_SCHEDULES = ("linear", "constant", "server")


@register("fedcomp", "fedcomp (ProxDrift): pre/post-prox local models, drift correction, server prox")
@dataclass
class FedComp(CompositeAlgorithm):
    """Each client keeps a pre-prox model z (corrected gradient steps) and a post-prox model
    x = P(z) where gradients are taken; the server averages the pre-prox models, so it gets the exact
    average gradient, and broadcasts only z^{r+1}, from which every client rebuilds x^{r+1} and its
    correction c_i = (global mean gradient) - (own mean gradient) of the last round (L16-18).

    local_prox_schedule: prox parameter at local step t+1: (t+1) eta (`linear`, the paper, L10),
    eta (`constant`) or eta_tilde = eta eta_g tau (`server`); the last two only for the ablation."""
    sends = (1, 1)  # per client and round, in d-vectors: z^{r+1} down, z_i up (composite.md §2.5, §7.1 item 7)
    lr_rows = True

    local_prox_schedule: str = "linear"

    metadata_keys = ("eta_tilde", "eta_tau", "steps")  # constants of the method, known to every client

    def validate(self) -> None:
        super().validate()
        if self.local_prox_schedule not in LOCAL_PROX_SCHEDULES:
            raise unknown_choice("algorithm.local_prox_schedule", self.local_prox_schedule, LOCAL_PROX_SCHEDULES)

    def setup(self, setting: Setting) -> None:
        super().setup(setting)
        # composite.md §2.6: the corrections average to zero only if every client takes part
        check(setting.clients_per_round == setting.num_clients,
              f"fedcomp needs full participation: set clients_per_round={setting.num_clients} (got {setting.clients_per_round})")

    def init(self, x0: Tensor) -> State:
        # eta_tilde = 0 until the first aggregation; round 0 is uncorrected (L2: c_i^0 = 0)
        return {"x": x0.clone(), "z": x0.clone(), "eta_tilde": x0.new_zeros(()), **self.init_metrics(x0)}

    def client_states(self) -> dict[str, ClientStateSpec]:
        d = self.setting.dim
        # x^{r-1} and the client's mean minibatch gradient s_i^{r-1} / tau of the last round
        return {"x_prev": ClientStateSpec((d,)), "grad_mean": ClientStateSpec((d,))}

    def broadcast(self, server: State, round_: int) -> State:
        return {"z": server["z"], "eta_tilde": server["eta_tilde"]}  # one d-vector (eta_tilde: a constant)

    def start(self, down: State, client: State, round_: int) -> tuple[Tensor, Tensor]:
        """(x^r, c_i^r) rebuilt on the client from the broadcast z^r (L17, L18)."""
        z, eta_tilde = down["z"], down["eta_tilde"]
        if round_ == 0:
            return z, torch.zeros_like(client["grad_mean"])
        x = self.reg.prox(z, eta_tilde)  # L17: x^r = P_{eta_tilde g}(z^r)
        return x, (client["x_prev"] - z) / eta_tilde - client["grad_mean"]  # L18

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, c = self.start(down, client, work.round)
        s, eta, tau = work.num_clients, work.lr, work.max_steps
        Z = x.expand(s, -1).clone()  # L5: z_{i,0} = x_{i,0} = x^r
        X = Z.clone()
        grad_sum = torch.zeros_like(Z)
        for t in range(tau):
            G, _ = work.grad(X, work.batch(t))  # L8: gradient at the post-prox local model
            grad_sum += G
            Z = Z - eta * (G + c)  # L9
            X = self.reg.prox(Z, self._local_prox(t, eta, tau))  # L10
        eta_tau = torch.full((s,), eta * tau, dtype=Z.dtype, device=Z.device) if not isinstance(eta, Tensor) \
            else (lr_per_client(eta) * tau).to(Z.dtype)
        up = {"z": Z, "eta_tau": eta_tau,
              "steps": work.steps.to(Z.dtype)}
        return up, {"x_prev": x.expand(s, -1), "grad_mean": grad_sum / tau}

    def _local_prox(self, t: int, eta: float, tau: int) -> float:
        if self.local_prox_schedule == "linear":
            return (t + 1) * eta
        if self.local_prox_schedule == "constant":
            return eta
        return eta * self.setting.eta_g * tau

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        _common_value(up["steps"], "the number of local steps")
        eta_tilde = self.setting.eta_g * up["eta_tau"][0]  # L1: eta_tilde = eta eta_g tau
        x = server["x"]
        z = x + self.setting.eta_g * (weighted_mean(up["z"], cohort.weights) - x)  # L14
        return {**server, "x": self.reg.prox(z, eta_tilde), "z": z, "eta_tilde": eta_tilde,  # L15
                "round": self.next_round(server)}


# -- FedMid (Yuan, Zaheer, Reddi) -------------------------------------------------------------------


@register("fedmid", "FedMid: local proximal SGD, server averages and applies a prox (Yuan et al. 2021)")
@dataclass
class FedMid(CompositeAlgorithm):
    """Federated mirror descent (composite.md §3.1): local steps w <- P_{eta_c g}(w - eta_c grad f_i(w));
    server w <- P_{eta_s eta_c tau g}(w + eta_s mean_i Delta_i) (server_prox), as in the FCO code."""
    sends = (1, 1)  # per client and round, in d-vectors: composite.md §7.1 item 7

    server_prox: bool = True

    metadata_keys = ("eta_tau",)

    def init(self, x0: Tensor) -> State:
        return {"x": x0.clone(), **self.init_metrics(x0)}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        w = down["x"]
        W = local_sgd(work, w, prox=self.reg.prox)  # local proximal SGD
        # the step count in the model's dtype first: a Python float times an int64 tensor is float32
        return {"delta": W - w, "eta_tau": work.steps.to(w.dtype) * work.lr}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        eta_s = self.setting.eta_g
        w = server["x"] + eta_s * weighted_mean(up["delta"], cohort.weights)
        if self.server_prox:
            w = self.reg.prox(w, eta_s * _common_value(up["eta_tau"], "eta_c * local steps"))
        return {**server, "x": w, "round": self.next_round(server)}


# -- FedDA (Yuan, Zaheer, Reddi) --------------------------------------------------------------------


@register("fedda", "FedDA (FedDualAvg): federated dual averaging, prox with the elapsed step (Yuan et al. 2021)")
@dataclass
class FedDA(CompositeAlgorithm):
    """Federated dual averaging (composite.md §3.2): one global dual sequence z, read through a prox
    whose parameter a is the elapsed total step size; the model is w = P_{a g}(z)."""

    metadata_keys = ("eta_tau",)

    @classmethod
    def floats_per_client(cls, dim: int) -> tuple[int, int]:
        return dim + 1, dim  # z and the scalar prox parameter a down (composite.md §7.1 item 7)

    def init(self, x0: Tensor) -> State:
        return {"z": x0.clone(), "a": x0.new_zeros(()), "w": x0.clone(), **self.init_metrics(x0)}

    def model(self, server: State) -> Tensor:
        return server["w"]

    def broadcast(self, server: State, round_: int) -> State:
        return {"z": server["z"], "a": server["a"]}  # d + 1 floats

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        z, a, eta_c = down["z"], down["a"], work.lr
        Z = z.expand(work.num_clients, -1).clone()
        for k in range(work.max_steps):
            W = self.reg.prox(Z, a + eta_c * k)  # primal retrieval (identity at r = k = 0)
            G, _ = work.grad(W, work.batch(k))
            Z = work.masked(k, Z - eta_c * G, Z)  # step on the dual
        # a = sum of eta_s eta_c tau exact in float64 (a float32 product would stall FedDA at ~1e-8)
        return {"delta": Z - z, "eta_tau": work.steps.to(z.dtype) * eta_c}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        eta_s = self.setting.eta_g
        z = server["z"] + eta_s * weighted_mean(up["delta"], cohort.weights)
        a = server["a"] + eta_s * _common_value(up["eta_tau"], "eta_c * local steps")
        return {**server, "z": z, "a": a, "w": self.reg.prox(z, a), "round": self.next_round(server)}


# -- Fast-FedDA (Bao, Crawshaw, Luo, Liu) -----------------------------------------------------------


@register("fastfedda", "Fast-FedDA: dual averaging with strong-convexity weights, decaying steps (Bao et al. 2022)")
@dataclass
class FastFedDA(CompositeAlgorithm):
    """Fast federated dual averaging (composite.md §3.3, the official LassoRun.m): cumulative gradient
    sum G and primal sum S (two vectors each way), anchor gamma at x^0; at global step t

        a = (G - (mu/2) S - gamma x^0) / t,  beta = mu/2 + gamma/t,  w = argmin_u <a,u> + beta/2 ||u||^2 + g(u)
          = P_{g/beta}(-a/beta),

    an effective step 1/(mu t/2 + gamma) that decays with t. gamma: null = 1/eta_l (composite.md §4.1)."""
    sends = (3, 2)  # per client and round, in d-vectors: G, S, w down, G_i, S_i up (composite.md §3.3)

    mu: float = 0.1
    gamma: float | None = None

    metadata_keys = ("x0", "t", "steps")

    def validate(self) -> None:
        super().validate()
        check(self.mu >= 0, f"algorithm.mu must be >= 0, got {self.mu}")
        check(self.gamma is None or self.gamma > 0, f"algorithm.gamma must be > 0 or null (1/eta_l), got {self.gamma}")

    def _gamma(self) -> float:
        return 1.0 / self.setting.eta_l if self.gamma is None else self.gamma

    def _primal(self, G: Tensor, S: Tensor, x0: Tensor, t: Tensor | float) -> Tensor:
        a = (G - self.mu / 2 * S - self._gamma() * x0) / t
        beta = self.mu / 2 + self._gamma() / t
        return self.reg.prox(-a / beta, 1 / beta)

    def init(self, x0: Tensor) -> State:
        return {"G": torch.zeros_like(x0), "S": x0.clone(), "w": x0.clone(), "x0": x0.clone(),
                "t": x0.new_zeros(()), **self.init_metrics(x0)}

    def model(self, server: State) -> Tensor:
        return server["w"]

    def broadcast(self, server: State, round_: int) -> State:
        # G, S, w: 3 vectors; x^0 and the step counter t are known to every client
        return {"G": server["G"], "S": server["S"], "w": server["w"], "x0": server["x0"], "t": server["t"]}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        s = work.num_clients
        G, S, W = (down[k].expand(s, -1).clone() for k in ("G", "S", "w"))
        for k in range(work.max_steps):
            g, _ = work.grad(W, work.batch(k))
            G = work.masked(k, G + g, G)
            W = work.masked(k, self._primal(G, S, down["x0"], down["t"] + k + 1), W)
            S = work.masked(k, S + W, S)
        return {"G": G, "S": S, "steps": work.steps.to(G.dtype)}, client

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        G, S = weighted_mean(up["G"], cohort.weights), weighted_mean(up["S"], cohort.weights)
        t = server["t"] + _common_value(up["steps"], "the number of local steps")
        w = self._primal(G, S, server["x0"], t)
        return {**server, "G": G, "S": S + w, "w": w, "t": t, "round": self.next_round(server)}
