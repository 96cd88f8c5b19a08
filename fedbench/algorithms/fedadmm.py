"""FedADMM, two algorithms of that name.

`fedadmm`: Gong, Li, Freris, "FedADMM: A Robust Federated Deep Learning Framework with
Adaptivity to System Heterogeneity", ICDE 2022 (arXiv:2204.03529), Alg. 1 and the official code.
Each client keeps a dual y_i (and, with local_init=local, its model w_i); local SGD (with the
run's shared local_momentum, 0.5 in the official code) on the augmented Lagrangian L_i(w) = f_i(w) + <y_i, w - theta> + rho/2 ||w - theta||^2
for E_i ~ U{1..E} epochs (system heterogeneity); dual ascent; one d-vector up (eq. 4); server
theta += eta * mean of the messages (eq. 5). The clients of a round train in parallel from theta
(Alg. 1 "in parallel"; the first official code, commit 3d1dca8). `chained=true` is the version its
authors released later (commit d9c043c, fedadmm.md §2.2): one model trained by the round's clients one
after another in cohort order, each message (w_k - w_{k-1}) + (w_k - theta); 2d floats down per client
(theta and the model it starts from).

`fedadmm_lowrank`: the consensus ADMM for min sum_i f_i(X_i) + lambda ||Z||_*, X_i = Z, that the
LoSAC paper compares against (Chen et al., TKDD 2023, arXiv:2112.07839, Appendix E, Alg. 3;
losac.md §3.6): the server solves eq. (82) by proximal-gradient steps over the table of the
clients' last uploads W_i = pi_i + rho X_i; clients take linearised primal steps (eq. 83) and
dual steps (eq. 84) on M fixed blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedbench.core.types import ClientStateSpec, Cohort, Setting, State
from fedbench.algorithms.base import EXTRAS, Algorithm
from fedbench.algorithms.common import check_hetero_schedule, local_sgd, weighted_mean, with_hetero_epochs
from fedbench.algorithms.losac import draw_blocks, make_regularizer
from fedbench.algorithms.prox import REGULARIZERS
from fedbench.algorithms.registry import register
from fedbench.core.errors import ConfigError, check, unknown_choice

LOCAL_INITS = ("global", "local")
SERVER_STEPS = ("eta", "participation")
GRAD_SCALES = ("inv_N", "one")


def _switch(name: str, value) -> tuple[int, float] | None:
    """A step schedule [R, v]: the value v from round R on (0-based, as the official code's
    `epoch >= target_round`); None = constant."""
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], int) and not isinstance(value[0], bool)
    ok = ok and value[0] >= 0 and isinstance(value[1], (int, float)) and not isinstance(value[1], bool) and value[1] >= 0
    check(ok, f"algorithm.{name} must be null or [round, value] with an integer round >= 0 and a value >= 0, got {value!r}")
    return int(value[0]), float(value[1])


def _scheduled(value: float, switch: tuple[int, float] | None, round_: int) -> float:
    return value if switch is None or round_ < switch[0] else switch[1]


@register("fedadmm", "FedADMM (Gong et al. 2022): local SGD on the augmented Lagrangian, persistent duals")
@dataclass
class FedADMM(Algorithm):
    sends = (1, 1)  # per client and round, in d-vectors: theta down, one message of d up (fedadmm.md §2, l. 78)
    lr_rows = True
    local_extras = EXTRAS  # local_momentum 0.5 is the official code's (conf/algorithm/fedadmm.yaml sets it)
    rho: float = 0.01  # augmented-Lagrangian coefficient
    local_init: str = "global"  # global: start from theta (official code) | local: from the stored w_i (Alg. 1)
    dual_update: bool = True  # false: y_i = 0 (FedProx's local problem)
    hetero_epochs: bool = True  # E_i ~ U{1..local_epochs} per client and round
    server_step: str = "eta"  # eta: theta += eta_g * mean | participation: eta = S/N (Theorem 1)
    rho_schedule: list | None = None  # [R, rho2]: rho2 from round R on (Fig. 9; A16: y_i keeps what it has)
    eta_schedule: list | None = None  # [R, eta2]: server step eta2 from round R on (Fig. 6; official code [60, 0.5])
    # as released (fedadmm.md §2.2, commit d9c043c): the round's clients train one after another, client k from
    # client k-1's result (the first from theta); prox and dual terms keep theta; message (w_k - w_{k-1}) + (w_k - theta)
    chained: bool = False

    def validate(self) -> None:
        check(self.rho >= 0, f"algorithm.rho must be >= 0, got {self.rho}")
        self._rho_switch = _switch("rho_schedule", self.rho_schedule)
        self._eta_switch = _switch("eta_schedule", self.eta_schedule)
        if self._eta_switch is not None and self.server_step != "eta":
            raise ConfigError(f"algorithm.eta_schedule={self.eta_schedule!r} sets eta, but algorithm.server_step="
                              f"{self.server_step!r} takes eta = S/N: use server_step=eta or eta_schedule=null")
        if self.local_init not in LOCAL_INITS:
            raise unknown_choice("algorithm.local_init", self.local_init, LOCAL_INITS)
        if self.server_step not in SERVER_STEPS:
            raise unknown_choice("algorithm.server_step", self.server_step, SERVER_STEPS)
        if self.chained and self.local_init == "local":
            raise ConfigError("algorithm.chained=true starts each client from the previous client's result, "
                              "algorithm.local_init=local from the client's own w_i: use local_init=global with chained=true")

    def validate_schedule(self, local_steps: int | None, local_epochs: int | None) -> None:
        check_hetero_schedule(self.hetero_epochs, local_steps, local_epochs)

    def rho_at(self, round_: int) -> float:
        return _scheduled(self.rho, self._rho_switch, round_)

    def eta_at(self, round_: int) -> float:
        return _scheduled(self.setting.eta_g, self._eta_switch, round_)

    def init(self, x0: Tensor) -> State:
        self._x0 = x0.clone()  # w_i^0 = theta^0 (§2.4)
        return {"x": x0.clone()}

    def client_states(self) -> dict[str, ClientStateSpec]:
        states = {"y": ClientStateSpec((self.setting.dim,), 0.0)}  # y_i^0 = 0
        if self.local_init == "local":
            states["w"] = ClientStateSpec((self.setting.dim,), self._x0)
        return states

    def work_of(self, work):
        return with_hetero_epochs(work, self.hetero_epochs)  # E_i ~ U{1..E}, the client's own stream

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        theta, y, rho = down["x"], client["y"], self.rho_at(work.round)  # A16: one rho for the whole round
        work = self.work_of(work)
        if self.chained:  # the previous client's result (relay), theta for the round's first
            w_start = down.get("start", theta)
        else:
            w_start = client["w"] if self.local_init == "local" else theta.expand(work.num_clients, -1)

        def direction(t, W, G, batch):
            # grad_w L_i = G + y + rho (W - theta) (Alg. 1 line 17), in this order; two fresh tensors, not four
            return (G + y).add_((W - theta).mul_(rho))

        W = local_sgd(work, w_start, direction)
        new = dict(client)
        if self.local_init == "local":
            new["w"] = W
        passed = {"w": W} if self.chained else {}  # the next client's start, taken off by relay
        if not self.dual_update:
            return {"delta": W - w_start, **passed}, new
        dual_delta = W - theta  # (y_new - y) / rho, exactly (eq. 4')
        new["y"] = y + rho * dual_delta  # line 20
        return {"delta": (W - w_start) + dual_delta, **passed}, new  # eq. (4)

    def chains_clients(self) -> bool:
        return self.chained

    def relay(self, down: State, up: State) -> tuple[State, State]:
        return {**down, "start": up["w"][0]}, {"delta": up["delta"]}

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        N, S = self.setting.num_clients, len(cohort.ids)
        eta = self.eta_at(cohort.round) if self.server_step == "eta" else S / N
        return {**server, "x": server["x"] + eta * weighted_mean(up["delta"], cohort.weights)}  # eq. (5)


@register("fedadmm_lowrank", "FedADMM for composite problems (LoSAC App. E, Alg. 3): server prox-gradient Z")
@dataclass
class FedADMMLowRank(Algorithm):
    sends = (1, 1)  # per client and round, in d-vectors: Z down, W_i = pi_i + rho X_i up (losac.md §3.6)
    lr_rows = True
    rho: float = 5.0  # penalty of the augmented Lagrangian (76)
    blocks: int = 5  # M fixed local blocks, one per local step
    z_lr: float = 1e-4  # eta_g of the server's proximal-gradient steps (81)
    z_steps: int = 20  # proximal-gradient steps per round for eq. (82)
    exact_z: bool = False  # solve eq. (82) in closed form instead
    grad_scale: str = "inv_N"  # inv_N: f_i has absorbed 1/N (App. E) | one
    regularizer: str = "nuclear"  # none | l1 | nuclear
    lam: float = 0.1  # lambda of the regularizer

    def validate(self) -> None:
        check(self.rho > 0, f"algorithm.rho must be > 0, got {self.rho}")
        check(self.z_lr > 0, f"algorithm.z_lr must be > 0, got {self.z_lr}")
        check(isinstance(self.z_steps, int) and self.z_steps >= 1, f"algorithm.z_steps must be an integer >= 1, got {self.z_steps!r}")
        check(isinstance(self.blocks, int) and self.blocks >= 1, f"algorithm.blocks must be an integer >= 1, got {self.blocks!r}")
        check(self.lam >= 0, f"algorithm.lam must be >= 0, got {self.lam}")
        if self.grad_scale not in GRAD_SCALES:
            raise unknown_choice("algorithm.grad_scale", self.grad_scale, GRAD_SCALES)
        if self.regularizer not in REGULARIZERS:
            raise unknown_choice("algorithm.regularizer", self.regularizer, REGULARIZERS)

    def setup(self, setting: Setting) -> None:
        super().setup(setting)
        self.reg = make_regularizer(self.regularizer, self.lam, setting.dim)

    def init(self, x0: Tensor) -> State:
        self._x0 = x0.clone()
        W = x0.new_zeros(self.setting.num_clients, self.setting.dim)  # W_i^0 = 0
        return {"x": x0.clone(), "z": self._solve_z(x0, W), "W": W}

    def client_states(self) -> dict[str, ClientStateSpec]:
        d = self.setting.dim
        return {"X": ClientStateSpec((d,), self._x0), "pi": ClientStateSpec((d,), 0.0)}

    def broadcast(self, server: State, round_: int) -> State:
        return {"z": server["z"]}

    def _solve_z(self, Z: Tensor, W: Tensor) -> Tensor:
        """eq. (82): argmin_Z lam ||Z||_* + sum_i (rho/2 ||Z||^2 - <W_i, Z>)."""
        N, rho, W_sum = self.setting.num_clients, self.rho, W.sum(0)
        if self.exact_z:
            return self.reg.prox(W_sum / (N * rho), 1.0 / (N * rho))
        for _ in range(self.z_steps):
            Z = self.reg.prox(Z - self.z_lr * (N * rho * Z - W_sum), self.z_lr)  # eq. (81)
        return Z

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        Z, X, Pi = down["z"], client["X"].clone(), client["pi"].clone()
        lr, rho = work.lr, self.rho
        scale = 1.0 / self.setting.num_clients if self.grad_scale == "inv_N" else 1.0
        for t in range(work.max_steps):
            G, _ = work.grad(X, work.block_batch(draw_blocks(work, t, self.blocks), self.blocks))
            X_new = (rho * lr * Z - lr * Pi + X - lr * scale * G) / (1 + rho * lr)  # eq. (83)
            X = work.masked(t, X_new, X)
            Pi = work.masked(t, Pi + rho * (X_new - Z), Pi)  # eq. (84)
        return {"W": Pi + rho * X}, {"X": X, "pi": Pi}

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        W = server["W"].clone()
        W[cohort.ids] = up["W"]  # the server keeps the other clients' last uploads
        # X_est = the Z the clients just used; the next round's Z solves (82) with the new table
        return {"x": server["z"], "z": self._solve_z(server["z"], W), "W": W}
