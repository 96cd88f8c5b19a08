"""The records the layers share: server and client state, the federation's setting, a round's
cohort, a minibatch, and the client-work protocol the algorithms program against (the engine's
LocalWork implements it). Nothing here imports another fedbench package."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

State = dict[str, Tensor]


@dataclass(frozen=True)
class ClientStateSpec:
    """Per-client persistent state: `shape` per client; initial value `init` (scalar or tensor)."""

    shape: tuple[int, ...]
    init: float | Tensor = 0.0


@dataclass(frozen=True)
class LocalExtras:
    """What every method's local SGD step may add, set once for the whole comparison (top-level
    `weight_decay`, `grad_clip`, `local_momentum`): a method's stochastic data direction g (the
    minibatch gradient; FedSpeed's perturbed g~) becomes clip(g) + weight_decay * x before the
    method's own terms, and the whole step direction goes through heavy-ball momentum
    (torch.optim.SGD semantics, fresh each round). All 0 (off) leaves a run bit for bit as it was."""

    weight_decay: float = 0.0  # the gradient of f_i + (weight_decay/2) ||x||^2
    grad_clip: float = 0.0  # per-client global-norm clip of g (torch.nn.utils.clip_grad_norm_); 0 = off
    momentum: float = 0.0  # heavy-ball momentum of the local steps; 0 = plain SGD

    NAMES = {"weight_decay": "weight_decay", "grad_clip": "grad_clip", "local_momentum": "momentum"}  # config key -> field

    def active(self) -> dict[str, float]:
        """The config keys of the extras that are on, with their values."""
        return {key: getattr(self, name) for key, name in self.NAMES.items() if getattr(self, name)}


@dataclass(frozen=True)
class Setting:
    """The federation an algorithm runs in, fixed for the run."""

    num_clients: int
    clients_per_round: int
    dim: int
    eta_l: float
    eta_g: float
    client_sizes: Tensor  # [N] local data set sizes
    device: torch.device = torch.device("cpu")
    # [N] p_i of the objective f = sum_i p_i f_i: 1/N (aggregation=uniform) or n_i / n (num_samples);
    # None means 1/N. Server states that track sum_i p_i (state_i) (SCAFFOLD's c, FedDyn's h) use it.
    client_weights: Tensor | None = None
    # x [d] -> (grad f(x), f(x)) for the federation's objective f = sum_i p_i f_i over all N clients
    # (p_i from `aggregation`): exact, costs one pass over all training data; for diagnostics only.
    objective_grad: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None
    eta_l_decay: float = 1.0  # eta_l at round r is eta_l * eta_l_decay**r
    extras: LocalExtras = LocalExtras()  # weight decay, clipping, momentum of every local step

    def local_lr(self, round_: int) -> float:
        """The local step size of round `round_` (the one home of the eta_l schedule)."""
        return self.eta_l * self.eta_l_decay**round_


def cohort_sum(setting: Setting, values: Tensor, cohort: Cohort) -> Tensor:
    """sum_{i in S} p_i values_i: the change of sum_i p_i state_i when only the cohort's states
    change (p_i = 1/N for uniform aggregation, so (|S|/N) mean)."""
    if setting.client_weights is None:
        return values.sum(0) / setting.num_clients
    return torch.tensordot(setting.client_weights[cohort.ids].to(values.dtype), values, dims=1)


@dataclass(frozen=True)
class Cohort:
    """The clients of one round: ids [S], sizes [S] and aggregation weights [S] summing to 1."""

    round: int
    ids: Tensor
    sizes: Tensor
    weights: Tensor


@dataclass
class Batch:
    """Minibatches of a chunk of clients: x [s, B, ...], y [s, B], per-sample weights w [s, B].
    `uniform`: every weight is 1/B (no padding, mean scaling), so the loss is a plain mean.
    `rows`: when only some clients of the chunk still work, their rows [a]; x, y, w then hold
    those a clients only (`LocalWork.grad` returns zero gradients for the others)."""

    x: Tensor
    y: Tensor
    w: Tensor
    uniform: bool = False
    rows: Tensor | None = None


class ClientWork(Protocol):
    """What a client update sees of its round (engine.local.LocalWork): a chunk of s clients'
    minibatches, gradients at any point, exact local gradients, LoSAC's blocks, and algorithm-side
    randomness drawn from the counter-based streams."""

    round: int
    lr: float | Tensor  # this round's local step size (Setting.local_lr); [s, 1] per client when lanes of several mix (lr_rows)
    extras: LocalExtras  # the run's shared local-step extras (Setting.extras)
    sizes: Tensor  # [s] local data set sizes
    steps: Tensor  # [s] local steps of each client this round
    max_steps: int
    epochs: Tensor | None  # [s] local epochs in epoch mode

    @property
    def num_clients(self) -> int: ...

    def with_epochs(self, epochs: Tensor) -> ClientWork:
        """The same round with per-client epoch counts (variable local work)."""

    def with_steps(self, steps: int, batch_size: int | None = None) -> ClientWork: ...

    def active(self, t: int) -> Tensor:
        """[s] bool: clients that still take local step t."""

    def descend(self, t: int, X: Tensor) -> bool:
        """Plain SGD step t in place on X for the clients still working, if the executor can (else
        False and X untouched)."""

    def masked(self, t: int, new: Tensor, old: Tensor) -> Tensor:
        """Step t's update for the clients still working, `old` for those done."""

    def batch(self, t: int) -> Batch:
        """Local step t's minibatch of every client."""

    def batch_index(self, t: int) -> Tensor: ...

    def block_batch(self, j: Tensor, num_blocks: int) -> Batch:
        """Block j[s] of M fixed local blocks, weighted so that g = M grad f_{i,j} (LoSAC)."""

    def full_batches(self, max_batch: int = 4096) -> Iterator[Batch]: ...

    def grad(self, X: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """(G [s, d], loss [s]) of the weighted batch loss at X [s, d]."""

    def full_grad(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Exact local gradient and loss of f_i at X [s, d]."""

    def uniform(self, *tags: int) -> Tensor:
        """Per-client uniforms in [0, 1)."""

    def randint(self, high: int, *tags: int) -> Tensor: ...
