"""Server optimisers: optax-style pairs of pure functions on the server's pseudo-gradient.

The pseudo-gradient is the averaged client delta Delta = sum_i w_i (x_i - x), a descent direction
(Reddi et al., "Adaptive Federated Optimization", ICLR 2021, arXiv:2003.00295, Alg. 1-2). An
optimiser maps it to the step added to x:

    state = opt.init(x)
    step, state = opt.update(delta, state)      # x <- x + step

States are dicts of tensors, so they live in the server dict and are checkpointed with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

OptState = dict[str, Tensor]


class ServerOptimizer(NamedTuple):
    """init(x) -> state;  update(delta, state) -> (step, new state)."""

    init: Callable[[Tensor], OptState]
    update: Callable[[Tensor, OptState], tuple[Tensor, OptState]]


def sgd(lr: float) -> ServerOptimizer:
    """x <- x + lr * Delta (FedAvg with server step eta_g; Reddi et al. Alg. 1)."""

    def init(x: Tensor) -> OptState:
        return {}

    def update(delta: Tensor, state: OptState) -> tuple[Tensor, OptState]:
        return lr * delta, state

    return ServerOptimizer(init, update)


def momentum(lr: float, beta: float) -> ServerOptimizer:
    """FedAvgM (Hsu, Qi, Brown 2019, arXiv:1909.06335, §3): v <- beta v + Delta; x <- x + lr v.

    Heavy-ball on the pseudo-gradient -Delta, i.e. torch.optim.SGD(momentum=beta) semantics."""

    def init(x: Tensor) -> OptState:
        return {"v": torch.zeros_like(x)}

    def update(delta: Tensor, state: OptState) -> tuple[Tensor, OptState]:
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

    def update(delta: Tensor, state: OptState) -> tuple[Tensor, OptState]:
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
