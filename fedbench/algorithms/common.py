"""Pieces shared by many algorithms: local SGD with a direction hook, weighted means."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from fedbench.core.types import Batch, ClientWork

Direction = Callable[[int, Tensor, Tensor, Batch], Tensor]


def local_sgd(
    work: ClientWork,
    x0: Tensor,
    direction: Direction | None = None,
    momentum: float = 0.0,
    prox: Callable[[Tensor, float], Tensor] | None = None,
) -> Tensor:
    """Run each client's local steps from x0 ([d] or [s, d]); returns the final X [s, d].

    Step t: G = grad on the client's minibatch at X; D = direction(t, X, G, batch) (default G);
    with momentum, torch.optim.SGD semantics (buf = m*buf + D); X <- prox(X - lr*D, lr).
    Clients whose local work is done (t >= steps_i) keep their X.
    """
    X = x0.expand(work.num_clients, -1).clone() if x0.dim() == 1 else x0.clone()
    buf = None
    for t in range(work.max_steps):
        batch = work.batch(t)
        G, _ = work.grad(X, batch)
        D = direction(t, X, G, batch) if direction is not None else G
        if momentum:
            buf = D if buf is None else momentum * buf + D
            D = buf
        X_new = sgd_step(X, D, work.lr)
        if prox is not None:
            X_new = prox(X_new, work.lr)
        X = work.masked(t, X_new, X)
    return X


def sgd_step(X: Tensor, D: Tensor, lr: float | Tensor) -> Tensor:
    """X - lr * D in one pass over [s, d] (as torch.optim.SGD); lr may be per client, [s, 1]
    (lanes of several step sizes in one chunk)."""
    return X.sub(D, alpha=lr) if not isinstance(lr, Tensor) else torch.addcmul(X, lr, D, value=-1)


def lr_per_client(lr: float | Tensor) -> float | Tensor:
    """The local step size for per-client [s] algebra (lr * steps): a float, or the [s, 1] step
    sizes of a mixed chunk as [s]."""
    return lr.view(-1) if isinstance(lr, Tensor) else lr


def weighted_mean(U: Tensor, weights: Tensor) -> Tensor:
    """sum_i w_i U_i for weights summing to one; U is [S, ...]."""
    return torch.tensordot(weights.to(U.dtype), U, dims=1)
