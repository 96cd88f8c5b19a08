"""The round loop: sample a cohort, broadcast, train the cohort in chunks, aggregate, evaluate."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fedbench.core.types import Cohort, State
from fedbench.algorithms.base import Algorithm
from fedbench.data.base import Dataset
from fedbench.engine.client_state import ClientStateTable
from fedbench.engine.evaluation import evaluate
from fedbench.engine.gradients import LOOP_BELOW
from fedbench.engine.local import ClientData, LocalWork, step_schedule
from fedbench.core.streams import sample_cohort
from fedbench.core.errors import DivergenceError
from fedbench.models.flat import FlatModel


@dataclass
class Federation:
    """Everything a run needs, built from the config by engine.build."""

    dataset: Dataset
    clients: ClientData
    flat: FlatModel
    algorithm: Algorithm
    x0: Tensor
    seed: int
    rounds: int
    clients_per_round: int
    batch_size: int
    local_steps: int | None
    local_epochs: int | None
    client_chunk: int
    eval_every: int
    train_loss_every: int
    aggregation: str  # 'uniform' or 'num_samples'
    client_state_device: torch.device
    device: torch.device
    group_by_work: bool = True  # chunks of clients with similar step counts (work_groups)
    eval_batch: int = 4096  # samples per evaluation call (executors.eval_batch_size)

    @property
    def eta_l(self) -> float:
        """The base local step size; the schedule lives in the algorithm's Setting (local_lr)."""
        return self.algorithm.setting.eta_l


@dataclass
class RunState:
    """What a checkpoint holds: the next round, server and client state, and the history."""

    round: int
    server: State
    tables: dict[str, ClientStateTable]
    history: list[dict[str, float]] = field(default_factory=list)
    floats_up: float = 0.0
    floats_down: float = 0.0
    wall_time: float = 0.0  # training rounds only: no evaluation, no warm-up
    eval_time: float = 0.0  # evaluations of the global model (test metrics, training loss)


def initial_state(fed: Federation) -> RunState:
    server = fed.algorithm.init(fed.x0)
    tables = {
        name: ClientStateTable(spec, fed.client_state_device, fed.x0.dtype)
        for name, spec in fed.algorithm.client_states().items()
    }
    return RunState(round=0, server=server, tables=tables)


def _numel(state: State, skip: tuple[str, ...]) -> int:
    return sum(v.numel() for k, v in state.items() if k not in skip)


def _concat(uploads: list[State]) -> State:
    return {k: torch.cat([u[k] for u in uploads]) for k in uploads[0]}


def work_spread(dim: int) -> float:
    """How unequal the step counts of one chunk may be (the first client's over the last's). An idle
    row costs elementwise work ~ d per step, a chunk a fixed ~1 ms of calls per step: small models
    tolerate more idle rows (mclr, d = 7,850: 4.4; mlp_2nn, d = 199,210: 1.4;
    scripts/bench_engine.py --unequal measured 4-16 best for mclr, 1.25-1.5 for mlp_2nn)."""
    return 1.25 + 25_000 / max(dim, 1)


def work_groups(steps: list[int], max_chunk: int, spread: float = 1.25, min_rows: int = LOOP_BELOW) -> list[list[int]]:
    """The cohort's positions in chunks of at most `max_chunk` clients of similar local work.

    A chunk runs as many steps as its busiest client and its elementwise algebra spans all its
    rows, so clients are taken most-steps first and a chunk closes when the next client's steps
    fall below 1/spread of its first's (`work_spread`). A chunk of fewer than `min_rows` clients (which would run as
    a loop) joins the chunk before it when that makes it batchable and leaves at most half of the
    joined chunk's row-steps idle. Equal work, or spread=inf, keeps the cohort's order in
    consecutive chunks.
    """
    order = sorted(range(len(steps)), key=lambda i: -steps[i]) if math.isfinite(spread) else range(len(steps))
    groups: list[list[int]] = []
    for i in order:
        if not groups or len(groups[-1]) == max_chunk or steps[i] * spread < steps[groups[-1][0]]:
            groups.append([])
        groups[-1].append(i)
    merged: list[list[int]] = []
    for group in groups:
        if merged and len(group) < min_rows <= len(merged[-1]) + len(group) <= max_chunk \
                and 2 * steps[group[0]] >= steps[merged[-1][0]]:
            merged[-1] = merged[-1] + group
        else:
            merged.append(group)
    return merged


def local_work(fed: Federation, ids: Tensor, round_: int, lr: float) -> LocalWork:
    """The local work of clients `ids` in a round, with the run's schedule (epochs or steps)."""
    epochs = None if fed.local_epochs is None else torch.full((len(ids),), fed.local_epochs, device=fed.device)
    return LocalWork(fed.clients, ids, round_, lr, fed.batch_size, epochs, fed.local_steps)


@dataclass
class ClientRound:
    """What the server receives in one round: the cohort, the broadcast the clients trained from,
    and their uploads in cohort order (two-phase rounds: the first uploads too)."""

    cohort: Cohort
    down: State  # after the second broadcast of a two-phase round
    prepared: State | None  # two-phase rounds' first uploads; None otherwise
    up: State
    lr: float  # the round's local step size
    steps: list[int]  # local steps per client, in cohort order


def client_round(fed: Federation, state: RunState, ids: list[int] | None = None) -> ClientRound:
    """The client half of round state.round: sample the cohort (or take `ids`), broadcast, train it in
    chunks of similar work, and collect the uploads in cohort order; the clients' own state is
    updated in place on `state`. The server state is left to the caller (run_round aggregates)."""
    algo, r = fed.algorithm, state.round
    if ids is None:
        ids = sample_cohort(fed.seed, r, fed.clients.num_clients, fed.clients_per_round).tolist()
    ids_t = torch.tensor(ids, device=fed.device)
    sizes = fed.clients.size[ids_t]
    weights = sizes.double() / sizes.sum() if fed.aggregation == "num_samples" else torch.full((len(ids),), 1.0 / len(ids), dtype=torch.float64, device=fed.device)
    cohort = Cohort(round=r, ids=ids_t, sizes=sizes, weights=weights)
    down = algo.broadcast(state.server, r)
    lr = algo.setting.local_lr(r)
    epochs = None if fed.local_epochs is None else torch.full((len(ids),), fed.local_epochs)
    steps = step_schedule(sizes.cpu(), fed.batch_size, epochs, fed.local_steps)[2].tolist()
    spread = work_spread(fed.flat.dim) if fed.group_by_work else math.inf
    groups = work_groups(steps, fed.client_chunk, spread)
    chunks = [([ids[i] for i in group], local_work(fed, ids_t[torch.tensor(group, device=fed.device)], r, lr))
              for group in groups]
    # the chunks' uploads, concatenated, are in `order`; `restore` puts them back in cohort order
    order = [i for group in groups for i in group]
    restore = None if order == sorted(order) else torch.tensor(order, device=fed.device).argsort()

    def client_state(chunk: list[int]) -> State:
        return {name: t.gather(chunk, fed.device) for name, t in state.tables.items()}

    def in_cohort_order(uploads: list[State]) -> State:
        up = _concat(uploads)
        return up if restore is None else {k: v[restore] for k, v in up.items()}

    prepared = None
    if algo.two_phase:  # Mime, FedDANE: the clients' first uploads shape a second broadcast
        prepared = in_cohort_order([algo.prepare(down, client_state(chunk), work) for chunk, work in chunks])
        down = algo.rebroadcast(state.server, down, prepared, cohort)
    uploads: list[State] = []
    for chunk, work in chunks:
        up, new_client = algo.client_update(down, client_state(chunk), work)
        for name, values in new_client.items():
            state.tables[name].scatter(chunk, values)
        uploads.append(up)
    return ClientRound(cohort, down, prepared, in_cohort_order(uploads), lr, steps)


def run_round(fed: Federation, state: RunState) -> tuple[float, float]:
    """One communication round in place on `state`; returns (floats down, floats up)."""
    algo = fed.algorithm
    received = client_round(fed, state)
    state.server = algo.aggregate(state.server, received.up, received.cohort)
    floats_down = len(received.cohort.ids) * _numel(received.down, algo.metadata_keys)
    floats_up = _numel(received.up, algo.metadata_keys)
    if received.prepared is not None:
        floats_up += _numel(received.prepared, algo.metadata_keys)
    return floats_down, floats_up


def warm_up(fed: Federation, state: RunState) -> float:
    """One untimed gradient of the next round's first chunk and one small evaluation at the current
    model, changing no state: the first use of the kernels (allocation, dispatch caches) is paid
    here and logged as `warmup_time`, so `wall_time` measures rounds alike. Returns its seconds."""
    t0 = time.perf_counter()
    cohort = sample_cohort(fed.seed, state.round, fed.clients.num_clients, fed.clients_per_round)
    work = local_work(fed, torch.as_tensor(cohort[: fed.client_chunk], device=fed.device), state.round, 0.0)
    x = fed.algorithm.model(state.server)
    work.grad(x.expand(work.num_clients, -1), work.batch(0))
    if fed.eval_every:
        data = fed.dataset
        evaluate(fed.flat, x, data.x_test[:2], data.y_test[:2], data.task)
    return time.perf_counter() - t0


def run(
    fed: Federation,
    state: RunState | None = None,
    on_round: Callable[[RunState, dict[str, float]], None] | None = None,
    warmup: float | None = None,
) -> RunState:
    """Run rounds state.round .. fed.rounds-1. `on_round` sees every round's metrics. `warmup`:
    the seconds of a warm_up(fed, state) the caller ran already (else it runs here)."""
    state = state or initial_state(fed)
    data = fed.dataset
    if warmup is None and state.round < fed.rounds:
        warmup = warm_up(fed, state)
    while state.round < fed.rounds:
        t0 = time.perf_counter()
        down, up = run_round(fed, state)
        state.floats_down += down
        state.floats_up += up
        state.round += 1
        x = fed.algorithm.model(state.server)
        if not bool(torch.isfinite(x).all()):
            raise DivergenceError(state.round, "non-finite model parameters")
        state.wall_time += time.perf_counter() - t0
        metrics: dict[str, float] = {
            "floats_down": state.floats_down,
            "floats_up": state.floats_up,
            "wall_time": state.wall_time,
            **fed.algorithm.metrics(state.server),
        }
        if warmup is not None:  # this process's one-off start-up of the kernels, apart from wall_time
            metrics["warmup_time"], warmup = warmup, None
        t0 = time.perf_counter()
        last = state.round == fed.rounds
        if fed.eval_every and (state.round % fed.eval_every == 0 or last):
            for k, v in evaluate(fed.flat, x, data.x_test, data.y_test, data.task, fed.eval_batch).items():
                metrics[f"test_{k}"] = v
            if data.model_metrics is not None:
                metrics.update(data.model_metrics(x))
        if fed.train_loss_every and (state.round % fed.train_loss_every == 0 or last):
            for k, v in evaluate(fed.flat, x, data.x_train, data.y_train, data.task, fed.eval_batch).items():
                metrics[f"train_{k}"] = v
        state.eval_time += time.perf_counter() - t0
        metrics["eval_time"] = state.eval_time
        for k in ("test_loss", "train_loss"):
            if k in metrics and not math.isfinite(metrics[k]):
                raise DivergenceError(state.round, f"non-finite {k.replace('_', ' ')}")
        metrics["round"] = state.round
        state.history.append(metrics)
        if on_round is not None:
            on_round(state, metrics)
    return state
