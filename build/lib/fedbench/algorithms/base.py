"""The algorithm interface.

An algorithm is a small dataclass of hyperparameters with four pure-ish functions over explicit
state, in the order of a round (DESIGN.md):

    init(x0)                          -> server state (dict of tensors)
    client_states()                   -> specs of per-client persistent state [N, ...]
    broadcast(server, round)          -> what goes down (dict of tensors, the same for every client)
    client_update(down, client, work) -> (what goes up [s, ...], new client state [s, ...])
    aggregate(server, up, cohort)     -> new server state
    metrics(server)                   -> optional extra per-round metrics (default none)

Two-phase rounds (`two_phase = True`, Mime) add `prepare(down, client, work)` (a first upload from
every client of the cohort) and `rebroadcast(server, down, prepared, cohort)` (the second
broadcast) between `broadcast` and `client_update`.

`client_update` is vectorised over a chunk of the cohort: every tensor it receives or returns
has the chunk's clients on dim 0, and it must treat clients independently (the engine may split
the cohort into chunks of any size). `work` (engine.local.LocalWork) gives the minibatches,
gradients, full local gradients and LoSAC's blocks. Floats up and down are counted from the
dicts returned by `broadcast` and `client_update` (`metadata_keys` are excluded).

Supported patterns: local step directions with corrections (FedProx, SCAFFOLD, FedDyn, FedCM,
FedSpeed, FedADMM), gradients at other points on the same batch (FedSpeed's ascent, Mime),
per-client tables (LoSAC's [M, d] blocks), variable local work (`work.with_epochs`), prox steps,
server-side optimisers and second-order state (FedOpt, FedSSO) kept in the server dict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

State = dict[str, Tensor]


@dataclass(frozen=True)
class ClientStateSpec:
    """Per-client persistent state: `shape` per client; initial value `init` (scalar or tensor)."""

    shape: tuple[int, ...]
    init: float | Tensor = 0.0


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
class Algorithm:
    """Base class: FedAvg-shaped defaults (x down, nothing persistent on clients)."""

    name: ClassVar[str] = ""
    metadata_keys: ClassVar[tuple[str, ...]] = ()
    two_phase: ClassVar[bool] = False  # rounds with a first upload before local training (Mime)
    setting: Setting = field(init=False, repr=False)

    def setup(self, setting: Setting) -> None:
        self.setting = setting

    def validate(self) -> None:
        """Raise ConfigError for impossible hyperparameter values."""

    def validate_schedule(self, local_steps: int | None, local_epochs: int | None) -> None:
        """Raise ConfigError when the run's local schedule cannot drive this algorithm (checked
        with the rest of the config, before any work)."""

    def init(self, x0: Tensor) -> State:
        return {"x": x0.clone()}

    def client_states(self) -> dict[str, ClientStateSpec]:
        return {}

    def broadcast(self, server: State, round_: int) -> State:
        return {"x": server["x"]}

    def prepare(self, down: State, client: State, work) -> State:
        """Two-phase rounds only: what each client uploads before local training."""
        raise NotImplementedError

    def rebroadcast(self, server: State, down: State, prepared: State, cohort: Cohort) -> State:
        """Two-phase rounds only: the second broadcast, built from the prepared uploads [S, ...].
        It holds everything the clients receive (the first broadcast's entries included), and
        floats down are counted on it alone."""
        raise NotImplementedError

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        raise NotImplementedError

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        raise NotImplementedError

    def model(self, server: State) -> Tensor:
        """The global model to evaluate."""
        return server["x"]

    def metrics(self, server: State) -> dict[str, float]:
        """Extra per-round metrics of the new server state (e.g. a stationarity measure), logged
        with the round's metrics; called after aggregation, outside the timed part of the round."""
        return {}
