"""Pieces shared by many algorithms: local SGD with a direction hook and the run's shared extras
(weight decay, clipping, momentum), system heterogeneity's random local epochs, weighted means."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from fedbench.core.errors import ConfigError
from fedbench.core.types import Batch, ClientWork, LocalExtras

Direction = Callable[[int, Tensor, Tensor, Batch], Tensor]
DataDirection = Callable[[Tensor, Tensor, Batch], Tensor]


def local_sgd(
    work: ClientWork,
    x0: Tensor,
    direction: Direction | None = None,
    prox: Callable[[Tensor, float], Tensor] | None = None,
    data_direction: DataDirection | None = None,
) -> Tensor:
    """Run each client's local steps from x0 ([d] or [s, d]); returns the final X [s, d].

    Step t: G = grad on the client's minibatch at X; g = data_direction(X, G, batch) (default G:
    the method's stochastic data direction, e.g. FedSpeed's perturbed mix); the run's shared extras
    g <- clip(g) + wd X (work.extras, `with_extras`); D = direction(t, X, g, batch) (default g);
    with work.extras.momentum, torch.optim.SGD semantics (buf = m*buf + D, fresh each round);
    X <- prox(X - lr*D, lr). Clients whose local work is done (t >= steps_i) keep their X.
    """
    extras = work.extras
    X = x0.expand(work.num_clients, -1).clone() if x0.dim() == 1 else x0.clone()
    plain = data_direction is None and direction is None and prox is None and not (
        extras.grad_clip or extras.weight_decay or extras.momentum)
    buf = None
    for t in range(work.max_steps):
        if plain and work.descend(t, X):  # X - lr G in place, where the executor can
            continue
        batch = work.batch(t)
        G, _ = work.grad(X, batch)
        if data_direction is not None:
            G = data_direction(X, G, batch)
        G = with_extras(extras, G, X)
        D = direction(t, X, G, batch) if direction is not None else G
        if extras.momentum:
            buf = D if buf is None else extras.momentum * buf + D
            D = buf
        X_new = sgd_step(X, D, work.lr)
        if prox is not None:
            X_new = prox(X_new, work.lr)
        X = work.masked(t, X_new, X)
    return X


EPOCH_TAG = 12  # the stream of the E_i draws: one for every algorithm, so one seed gives FedADMM and FedProx the same E_i


def heterogeneous_epochs(work: ClientWork) -> Tensor:
    """E_i ~ Uniform{1..E} per client and round (fedadmm.md §2.5; E = the configured local_epochs)."""
    if work.epochs is None:
        raise ConfigError("hetero_epochs=true draws E_i from {1..local_epochs}: set local_epochs (not local_steps)")
    E = work.epochs.to(torch.float64)
    return (work.uniform(EPOCH_TAG) * E).long().minimum(E.long() - 1) + 1


def with_hetero_epochs(work: ClientWork, on: bool) -> ClientWork:
    """The round's work with each client's own E_i ~ U{1..E} epochs when `on` (system heterogeneity: the
    FedADMM paper's §V-A gives FedADMM and FedProx these draws, FedAvg and SCAFFOLD a fixed E), else as it is."""
    return work.with_epochs(heterogeneous_epochs(work)) if on else work


def check_hetero_schedule(on: bool, local_steps: int | None, local_epochs: int | None) -> None:
    """The config check of `algorithm.hetero_epochs` (before any work): the draws need local_epochs."""
    if on and local_epochs is None:
        raise ConfigError(
            f"algorithm.hetero_epochs=true draws E_i from {{1..local_epochs}}, but local_epochs=null "
            f"(local_steps={local_steps}): set local_epochs=E, or algorithm.hetero_epochs=false"
        )


def with_extras(extras: LocalExtras, G: Tensor, X: Tensor) -> Tensor:
    """clip(G) + weight_decay * X: the shared extras on a stochastic data direction G [s, d] at X
    (the gradient of the minibatch loss + (wd/2)||x||^2 with its data part clipped); G itself when
    both are off."""
    if extras.grad_clip:
        G = clip_rows(G, extras.grad_clip)
    if extras.weight_decay:
        G = G + extras.weight_decay * X
    return G


def clip_rows(G: Tensor, max_norm: float) -> Tensor:
    """Per-client global-norm clipping (torch.nn.utils.clip_grad_norm_ semantics: the factor
    max_norm / (||g|| + 1e-6), at most 1); 0 = off."""
    if not max_norm:
        return G
    norm = G.norm(dim=1, keepdim=True)
    return G * (max_norm / (norm + 1e-6)).clamp(max=1.0)


def momentum_steps(steps: Tensor, momentum: float) -> Tensor:
    """The displacement of `steps` local steps along a constant direction g, in units of lr * g:
    K for plain SGD, sum_{k=1..K} (1 - m^k) / (1 - m) with heavy-ball momentum m. Methods that
    read a unit-step pseudo-gradient off the local displacement (SCAFFOLD's option II, FedCM)
    divide by it, so that a shared local momentum does not inflate their estimates by ~1/(1 - m)."""
    if not momentum:
        return steps
    K = steps.double()  # steps: a float tensor [s]
    return ((K - momentum * (1 - momentum**K) / (1 - momentum)) / (1 - momentum)).to(steps.dtype)


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
