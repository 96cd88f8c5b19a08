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

Chained rounds (`chains_clients()` true; FedADMM as its authors released it) train the cohort's
clients one after another in cohort order: after each client, `relay(down, up)` turns the broadcast
it trained from and its upload into the next client's broadcast and what the server keeps of the
upload. Lanes of a batched grid still train side by side (client k of every lane in one chunk).

`client_update` is vectorised over a chunk of the cohort: every tensor it receives or returns
has the chunk's clients on dim 0, and it must treat clients independently (the engine may split
the cohort into chunks of any size). `work` (core.types.ClientWork, implemented by the
engine's LocalWork) gives the minibatches, gradients, full local gradients and LoSAC's blocks.
Floats up and down are counted from the dicts returned by `broadcast` and `client_update` (`metadata_keys` are excluded).

Supported patterns: local step directions with corrections (FedProx, SCAFFOLD, FedDyn, FedCM,
FedSpeed, FedADMM), gradients at other points on the same batch (FedSpeed's ascent, Mime),
per-client tables (LoSAC's [M, d] blocks), variable local work (`work.with_epochs`), prox steps,
server-side optimisers and second-order state (FedOpt, FedSSO) kept in the server dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from torch import Tensor

from fedbench.core.types import Cohort, ClientStateSpec, ClientWork, LocalExtras, Setting, State

EXTRAS = tuple(LocalExtras.NAMES)  # the config keys of the shared local-step extras


@dataclass
class Algorithm:
    """Base class: FedAvg-shaped defaults (x down, nothing persistent on clients)."""

    name: ClassVar[str] = ""
    metadata_keys: ClassVar[tuple[str, ...]] = ()
    two_phase: ClassVar[bool] = False  # rounds with a first upload before local training (Mime)
    # the client update takes `work.lr` per client ([s, 1] tensor), so lanes of a batched grid that
    # differ in eta_l (or its decay) share chunks; checked by the contract test for each algorithm
    lr_rows: ClassVar[bool] = False
    # the shared extras (top-level weight_decay, grad_clip, local_momentum; core.types.LocalExtras)
    # its local step takes; config validation refuses a non-zero one that is not listed
    local_extras: ClassVar[tuple[str, ...]] = ()
    # floats each participating client receives and sends per round, (down, up), in model-sized vectors
    # (d floats each), as its paper counts them; floats_per_client() where a count is not that (FedNL's
    # d x d Hessian). Declared, not inferred: fedbench.testing checks the engine's count against it
    sends: ClassVar[tuple[int, int] | None] = None
    setting: Setting = field(init=False, repr=False)

    @classmethod
    def floats_per_client(cls, dim: int) -> tuple[int, int]:
        """(down, up) floats per participating client and round for a model of `dim` parameters."""
        if cls.sends is None:
            raise NotImplementedError(f"{cls.__name__} declares no communication count: set `sends = (down, up)` on "
                                      "the class, in model-sized vectors per client and round, with its source")
        return cls.sends[0] * dim, cls.sends[1] * dim

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

    def prepare(self, down: State, client: State, work: ClientWork) -> State:
        """Two-phase rounds only: what each client uploads before local training."""
        raise NotImplementedError

    def rebroadcast(self, server: State, down: State, prepared: State, cohort: Cohort) -> State:
        """Two-phase rounds only: the second broadcast, built from the prepared uploads [S, ...].
        It holds everything the clients receive (the first broadcast's entries included), and
        floats down are counted on it alone."""
        raise NotImplementedError

    def work_of(self, work):
        """The local work this method gives the clients of `work`: the run's schedule, or its own (FedADMM's and
        FedProx's drawn E_i). The engine groups clients of similar work into chunks by it."""
        return work

    def chains_clients(self) -> bool:
        """Whether a round's clients train one after another, each from the previous one's result (relay)."""
        return False

    def relay(self, down: State, up: State) -> tuple[State, State]:
        """Chained rounds only: (the next client's broadcast, the upload the server receives) from the broadcast
        `down` one client trained from and its upload `up` ([1, ...] rows)."""
        raise NotImplementedError

    def client_update(self, down: State, client: State, work: ClientWork) -> tuple[State, State]:
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
