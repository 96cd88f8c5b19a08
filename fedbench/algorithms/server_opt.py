"""Server optimisers: optax-style pairs of pure functions on the server's pseudo-gradient.

The pseudo-gradient is the averaged client delta Delta = sum_i w_i (x_i - x), a descent direction
(Reddi et al., "Adaptive Federated Optimization", ICLR 2021, arXiv:2003.00295, Alg. 1-2). An
optimiser maps it to the step added to x:

    state = opt.init(x)
    step, state = opt.update(delta, state, x)   # x <- x + step

States are dicts of tensors, so they live in the server dict and are checkpointed with it: `update`
reads its own entries of the dict it is given and returns only those. `x` is optax's `params`,
needed by the quasi-Newton servers (algorithms/quasi_newton.py) and ignored by the others.

`algorithm.server_opt` names one of SERVER_OPTIMIZERS with its hyperparameters: a name (its paper's
defaults), or a mapping {name: adam, beta1: ..., ...}; `apply` is the one server step
x <- x + step(Delta) of every algorithm whose server step has that shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import torch
from torch import Tensor

from fedbench.core.errors import ConfigError, check, unknown_choice

OptState = dict[str, Tensor]


class ServerOptimizer(NamedTuple):
    """init(x) -> state;  update(delta, state, x=None) -> (step, new state)."""

    init: Callable[[Tensor], OptState]
    update: Callable[..., tuple[Tensor, OptState]]


def apply(opt: ServerOptimizer, server: OptState, delta: Tensor) -> OptState:
    """The server step on the pseudo-gradient Delta (Reddi et al. Alg. 1-2): x <- x + opt's step;
    the optimiser's state is updated in place of its old entries of the server dict."""
    x = server["x"]
    step, state = opt.update(delta, server, x)
    return {**server, **state, "x": x + step.to(x.dtype)}


def sgd(lr: float) -> ServerOptimizer:
    """x <- x + lr * Delta (FedAvg with server step eta_g; Reddi et al. Alg. 1)."""

    def init(x: Tensor) -> OptState:
        return {}

    def update(delta: Tensor, state: OptState, x: Tensor | None = None) -> tuple[Tensor, OptState]:
        return lr * delta, {}

    return ServerOptimizer(init, update)


def momentum(lr: float, beta: float) -> ServerOptimizer:
    """FedAvgM (Hsu, Qi, Brown 2019, arXiv:1909.06335, §3): v <- beta v + Delta; x <- x + lr v.

    Heavy-ball on the pseudo-gradient -Delta, i.e. torch.optim.SGD(momentum=beta) semantics."""

    def init(x: Tensor) -> OptState:
        return {"v": torch.zeros_like(x)}

    def update(delta: Tensor, state: OptState, x: Tensor | None = None) -> tuple[Tensor, OptState]:
        v = beta * state["v"] + delta
        return lr * v, {"v": v}

    return ServerOptimizer(init, update)


def _adaptive(
    second_moment: Callable[[Tensor, Tensor], Tensor], lr: float, beta1: float, tau: float, v0: float
) -> ServerOptimizer:
    """Reddi et al. Alg. 2: m_t = b1 m_{t-1} + (1 - b1) Delta_t;  v_t = second_moment(v_{t-1}, Delta_t^2);
    x_{t+1} = x_t + lr * m_t / (sqrt(v_t) + tau). No bias correction; m_{-1} = 0, v_{-1} = v0."""

    def init(x: Tensor) -> OptState:
        return {"m": torch.zeros_like(x), "v": torch.full_like(x, v0)}

    def update(delta: Tensor, state: OptState, x: Tensor | None = None) -> tuple[Tensor, OptState]:
        m = beta1 * state["m"] + (1 - beta1) * delta
        v = second_moment(state["v"], delta * delta)
        return lr * m / (v.sqrt() + tau), {"m": m, "v": v}

    return ServerOptimizer(init, update)


def adagrad(lr: float, beta1: float, tau: float, v0: float) -> ServerOptimizer:
    """FedAdagrad: v_t = v_{t-1} + Delta_t^2."""
    return _adaptive(lambda v, d2: v + d2, lr, beta1, tau, v0)


def adam(lr: float, beta1: float, beta2: float, tau: float, v0: float) -> ServerOptimizer:
    """FedAdam: v_t = b2 v_{t-1} + (1 - b2) Delta_t^2."""
    return _adaptive(lambda v, d2: beta2 * v + (1 - beta2) * d2, lr, beta1, tau, v0)


def yogi(lr: float, beta1: float, beta2: float, tau: float, v0: float) -> ServerOptimizer:
    """FedYogi: v_t = v_{t-1} - (1 - b2) Delta_t^2 sign(v_{t-1} - Delta_t^2)."""
    return _adaptive(lambda v, d2: v - (1 - beta2) * d2 * torch.sign(v - d2), lr, beta1, tau, v0)


# -- algorithm.server_opt: a name and its hyperparameters --------------------------------------------
@dataclass(frozen=True)
class Sgd:
    """The plain step x <- x + eta_g Delta (FedAvg)."""

    def build(self, lr: float) -> ServerOptimizer:
        return sgd(lr)


@dataclass(frozen=True)
class Momentum:
    """FedAvgM; Hsu et al. run beta = 0.9."""

    momentum: float = 0.9

    def __post_init__(self):
        check(0 <= self.momentum < 1, f"algorithm.server_opt.momentum must lie in [0, 1), got {self.momentum}")

    def build(self, lr: float) -> ServerOptimizer:
        return momentum(lr, self.momentum)


@dataclass(frozen=True)
class Adagrad:
    """FedAdagrad; defaults of Reddi et al. Alg. 2 (beta1 = 0.9, tau = 1e-3, v_{-1} = tau^2)."""

    beta1: float = 0.9
    tau: float = 1e-3  # adaptivity: x += eta_g * m / (sqrt(v) + tau)
    v0: float | None = None  # v_{-1}; None: tau^2 (Alg. 2 asks v_{-1} >= tau^2)

    def __post_init__(self):
        check(0 <= self.beta1 < 1, f"algorithm.server_opt.beta1 must lie in [0, 1), got {self.beta1}")
        check(self.tau > 0, f"algorithm.server_opt.tau must be > 0, got {self.tau}")
        check(self.v0 is None or self.v0 >= 0, f"algorithm.server_opt.v0 must be >= 0 or null, got {self.v0}")

    @property
    def initial_v(self) -> float:
        return self.tau**2 if self.v0 is None else float(self.v0)

    def build(self, lr: float) -> ServerOptimizer:
        return adagrad(lr, self.beta1, self.tau, self.initial_v)


@dataclass(frozen=True)
class Adam(Adagrad):
    """FedAdam; Reddi et al. Alg. 2 with beta2 = 0.99."""

    beta2: float = 0.99

    def __post_init__(self):
        super().__post_init__()
        check(0 < self.beta2 < 1, f"algorithm.server_opt.beta2 must lie in (0, 1), got {self.beta2}")

    def build(self, lr: float) -> ServerOptimizer:
        return adam(lr, self.beta1, self.beta2, self.tau, self.initial_v)


@dataclass(frozen=True)
class Yogi(Adam):
    """FedYogi; the same defaults as FedAdam."""

    def build(self, lr: float) -> ServerOptimizer:
        return yogi(lr, self.beta1, self.beta2, self.tau, self.initial_v)


SERVER_OPTIMIZERS = {"sgd": Sgd, "momentum": Momentum, "adagrad": Adagrad, "adam": Adam, "yogi": Yogi}


def parse(value: str | Mapping[str, Any]):
    """algorithm.server_opt (a name, or {name: ..., <hyperparameter>: ...}) -> its spec;
    a ConfigError names a bad name, an unknown hyperparameter or a bad value."""
    params = {"name": value} if isinstance(value, str) else dict(value)
    name = params.pop("name", None)
    if name is None and params:  # `server_opt=adam server_opt.tau=3`: Hydra's second override replaced the name
        keys = " ".join(f"algorithm.server_opt.{k}={v}" for k, v in params.items())
        raise ConfigError(f"algorithm.server_opt has settings ({keys}) but no name: a bare algorithm.server_opt=<name> "
                          f"cannot take settings on the same command line. Name the variant instead, e.g. "
                          f"algorithm=fedavg/adam {keys} (variants: fedavg/{{avgm,adagrad,adam,yogi}})")
    if name not in SERVER_OPTIMIZERS:
        raise unknown_choice("algorithm.server_opt", name, SERVER_OPTIMIZERS)
    cls = SERVER_OPTIMIZERS[name]
    valid = [f.name for f in fields(cls)]
    for key in params:
        if key not in valid:
            raise ConfigError(f"Unknown parameter algorithm.server_opt.{key} for server_opt {name!r}. "
                              f"Valid: {', '.join(valid) or '(none)'}.")
    return cls(**params)


def full_mapping(name: str) -> dict[str, Any]:
    """A bare `algorithm.server_opt=<name>` as the mapping a variant file writes: the name, then that
    optimiser's defaults by key (so the two spellings are one recorded config)."""
    spec = parse(name)  # a ConfigError on an unknown name
    return {"name": name, **dict(sorted(asdict(spec).items()))}
