"""The round loop: sample a cohort, broadcast, train the cohort in chunks, aggregate, evaluate."""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from fedbench.core.types import Cohort, State
from fedbench.algorithms.base import Algorithm
from fedbench.data.base import Dataset
from fedbench.engine.client_state import DISK_FOLDER, ClientStateTable, DiskClientStateTable
from fedbench.engine.evaluation import evaluate
from fedbench.engine.gradients import LOOP_BELOW
from fedbench.engine.local import ClientData, LocalWork, step_schedule
from fedbench.engine.returns import blame, check_model, check_state
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
    client_state_disk: bool = False  # per-client state in memory-mapped files (engine.client_state_device=disk)
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


def initial_state(fed: Federation, folder: Path | None = None) -> RunState:
    """Round 0's state. Disk tables (fed.client_state_disk) live in `folder`/client_state (the run
    directory), or in a temporary folder removed with the state when none is given."""
    server = fed.algorithm.init(fed.x0)
    check_state(fed.algorithm, "init", server, fed.x0.dtype)
    specs = fed.algorithm.client_states()
    if fed.client_state_disk and specs:
        scratch = None
        if folder is None:
            scratch = tempfile.TemporaryDirectory(prefix="fedbench-client-state-")
            folder = Path(scratch.name)
        tables: dict[str, ClientStateTable] = {
            name: DiskClientStateTable(spec, fed.clients.num_clients, fed.x0.dtype, folder / DISK_FOLDER, name)
            for name, spec in specs.items()
        }
        for table in tables.values():
            table.scratch = scratch  # kept alive (and the folder) while a table is
    else:
        tables = {name: ClientStateTable(spec, fed.client_state_device, fed.x0.dtype, fed.clients.num_clients)
                  for name, spec in specs.items()}
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
    joined chunk's row-steps idle. Equal work, spread=inf or max_chunk=1 (the loop executor: its
    uploads then need no reordering) keeps the cohort's order in consecutive chunks.
    """
    grouped = math.isfinite(spread) and max_chunk > 1  # chunks of one client: nothing to group, no reordering
    order = sorted(range(len(steps)), key=lambda i: -steps[i]) if grouped else range(len(steps))
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
    return LocalWork(fed.clients, ids, round_, lr, fed.batch_size, epochs, fed.local_steps,
                     extras=fed.algorithm.setting.extras)


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


def mixing_key(fed: Federation) -> tuple:
    """Runs (lanes) with equal keys may share a chunk: the same hyperparameters, so that one client
    update serves them all (the shared local-step extras included); they may differ in the seed
    (cohorts, minibatches, draws, x0), and in the local step size where the algorithm takes it per
    client (`lr_rows`)."""
    algo, setting = fed.algorithm, fed.algorithm.setting
    fields = tuple((f.name, repr(getattr(algo, f.name))) for f in dataclasses.fields(algo) if f.name != "setting")
    schedule = fed.batch_size, fed.local_steps, fed.local_epochs, setting.clients_per_round
    steps = () if algo.lr_rows else (setting.eta_l, setting.eta_l_decay)  # a per-client work.lr, or one
    return type(algo), fields, steps, setting.eta_g, setting.extras, schedule


def client_round(fed: Federation, state: RunState, ids: list[int] | None = None) -> ClientRound:
    """The client half of round state.round: sample the cohort (or take `ids`), broadcast, train it in
    chunks of similar work, and collect the uploads in cohort order; the clients' own state is
    updated in place on `state`. The server state is left to the caller (run_round aggregates)."""
    return lanes_client_round([fed], [state], None if ids is None else [ids])[0]


def lanes_client_round(feds: list[Federation], states: list[RunState], ids: list[list[int]] | None = None,
                       failures: dict[int, Exception] | None = None) -> list[ClientRound | None]:
    """client_round of several runs (lanes) at the same round, sharing their clients' data: the
    cohorts of lanes with the same hyperparameters (`mixing_key`) are trained together in chunks
    of similar work, each client with its own run's seed, broadcast and client state. Clients are
    independent in a client update, so every lane gets what it would get alone.
    With `failures`, what an algorithm's method raises fails the lanes it ran for (in `failures`, their
    ClientRound None) and the others go on; without it, it propagates."""
    fed0, r = feds[0], states[0].round
    guard = _Guard(failures)
    lanes = []
    for k, (fed, state) in enumerate(zip(feds, states)):
        algo = fed.algorithm
        lane_ids = sample_cohort(fed.seed, r, fed.clients.num_clients, fed.clients_per_round).tolist() \
            if ids is None else ids[k]
        ids_t = torch.tensor(lane_ids, device=fed.device)
        sizes = fed.clients.size[ids_t]
        weights = sizes.double() / sizes.sum() if fed.aggregation == "num_samples" else \
            torch.full((len(lane_ids),), 1.0 / len(lane_ids), dtype=torch.float64, device=fed.device)
        epochs = None if fed.local_epochs is None else torch.full((len(lane_ids),), fed.local_epochs)
        steps = step_schedule(sizes.cpu(), fed.batch_size, epochs, fed.local_steps)[2].tolist()
        with guard([k]):
            down = algo.broadcast(state.server, r)
        lanes.append(_Lane(fed, state, lane_ids, ids_t, Cohort(round=r, ids=ids_t, sizes=sizes, weights=weights),
                           down if k not in guard.failed else {}, algo.setting.local_lr(r), steps))
    fed0.clients.prepare([i for lane in lanes for i in lane.ids])  # a population makes its cohorts' data now
    if fed0.clients.on_demand and ids is None and r + 1 < max(fed.rounds for fed in feds):  # and the next round's while this one trains
        fed0.clients.prefetch([i for fed in feds for i in
                               sample_cohort(fed.seed, r + 1, fed.clients.num_clients, fed.clients_per_round).tolist()])
    # a method that sets its clients' work (FedADMM's E_i): chunks of similar work by it
    work_steps = [_own_steps(lane, r) if type(lane.fed.algorithm).work_of is not Algorithm.work_of else lane.steps
                  for lane in lanes]
    classes: dict[tuple, list[int]] = {}
    for k, fed in enumerate(feds):
        classes.setdefault(mixing_key(fed) if len(feds) > 1 else (), []).append(k)
    chunks: list[list[tuple[int, int]]] = []  # (lane, position in its cohort) of each chunk's clients
    for members in classes.values():
        members = [k for k in members if k not in guard.failed]
        if not members:
            continue
        if lanes[members[0]].fed.algorithm.chains_clients():  # one client of every lane at a time, in cohort order
            chunks += [[(k, p) for k in members] for p in range(len(lanes[members[0]].ids))]
            continue
        rows = [(k, p) for k in members for p in range(len(lanes[k].ids))]
        spread = work_spread(fed0.flat.dim) if fed0.group_by_work else math.inf
        chunks += [[rows[i] for i in group]
                   for group in work_groups([work_steps[k][p] for k, p in rows], fed0.client_chunk, spread)]
    works = [_chunk_work(lanes, chunk) for chunk in chunks]

    prepared: list[State | None] = [None] * len(lanes)
    two_phase = [i for i, chunk in enumerate(chunks) if lanes[chunk[0][0]].fed.algorithm.two_phase]
    if two_phase:  # Mime, FedDANE: the clients' first uploads shape a second broadcast
        firsts = []
        for i in two_phase:
            firsts.append(None)
            if guard.skips(in_chunk := sorted({k for k, _ in chunks[i]})):
                continue
            with guard(in_chunk):
                firsts[-1] = lanes[chunks[i][0][0]].fed.algorithm.prepare(_chunk_down(lanes, chunks[i]),
                                                                          _chunk_state(lanes, chunks[i]), works[i])
        prepared = _by_lane(lanes, [chunks[i] for i in two_phase], firsts, guard.failed)
        for k, (lane, first) in enumerate(zip(lanes, prepared)):
            if first is not None:
                with guard([k]):
                    lane.down = lane.fed.algorithm.rebroadcast(lane.state.server, lane.down, first, lane.cohort)
    uploads: list[State | None] = []
    for chunk, work in zip(chunks, works):
        in_chunk = sorted({k for k, _ in chunk})
        up = None
        if not guard.skips(in_chunk):
            with guard(in_chunk):  # a chunk's lanes share one client update: what it raises fails them all
                algo = lanes[chunk[0][0]].fed.algorithm
                up, new_client = algo.client_update(_chunk_down(lanes, chunk), _chunk_state(lanes, chunk), work)
                check_state(algo, "client_update", up, fed0.x0.dtype, len(chunk), what="the upload ")
                check_state(algo, "client_update", new_client, fed0.x0.dtype, len(chunk), what="the client state ")
                if algo.chains_clients():
                    up = _relay(lanes, chunk, up)
                for k in in_chunk:
                    at = [j for j, (kk, _) in enumerate(chunk) if kk == k]
                    sel = None if len(at) == len(chunk) else torch.tensor(at, device=fed0.device)
                    lane_ids = [lanes[k].ids[chunk[j][1]] for j in at]
                    for name, values in new_client.items():
                        lanes[k].state.tables[name].scatter(lane_ids, values if sel is None else values[sel])
        uploads.append(up)
    ups = _by_lane(lanes, chunks, uploads, guard.failed)
    return [None if k in guard.failed else ClientRound(lane.cohort, lane.down, prepared[k], ups[k], lane.lr, lane.steps)
            for k, lane in enumerate(lanes)]


class _Guard:
    """`with guard(lanes):` what the block raises fails those lanes (recorded in `failures`, the block left), when
    the caller collects failures; else it propagates."""

    def __init__(self, failures: dict[int, Exception] | None):
        self.failures = failures
        self.failed: set[int] = set()
        self.lanes: list[int] = []

    def __call__(self, lanes: list[int]) -> _Guard:
        self.lanes = lanes
        return self

    def skips(self, lanes: list[int]) -> bool:
        """A chunk holding a lane that failed is not computed: its other lanes fail with it (their clients' uploads
        would be missing)."""
        failed = self.failed.intersection(lanes)
        if failed:
            exc = self.failures[min(failed)]
            for k in lanes:
                self.failures.setdefault(k, exc)
                self.failed.add(k)
        return bool(failed)

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or self.failures is None or not isinstance(exc, Exception):
            return False
        for k in self.lanes:
            self.failures.setdefault(k, exc)
            self.failed.add(k)
        return True


def _relay(lanes: list[_Lane], chunk: list[tuple[int, int]], up: State) -> State:
    """Chained rounds: each lane's next client trains from what this one produced (lane.down becomes the
    relayed broadcast); returns the uploads the server keeps, rows in chunk order."""
    kept = []
    for j, (k, _) in enumerate(chunk):
        lanes[k].down, row = lanes[k].fed.algorithm.relay(lanes[k].down, {key: v[j : j + 1] for key, v in up.items()})
        kept.append(row)
    return _concat(kept)


@dataclass
class _Lane:
    """One run's part of a round: its cohort, broadcast, step size and clients' step counts."""

    fed: Federation
    state: RunState
    ids: list[int]
    ids_t: Tensor
    cohort: Cohort
    down: State
    lr: float
    steps: list[int]  # the run's schedule (what an observer of the round assumes: attacks.dlg)


def _own_steps(lane: _Lane, round_: int) -> list[int]:
    """The local steps the lane's algorithm gives each client of its cohort this round. Its draws are each client's
    own stream (LocalWork.uniform), the same in any chunk, so they are those its client update will make."""
    fed = lane.fed
    work = local_work(fed, lane.ids_t, round_, 0.0)
    if fed.seed != fed.clients.seed:
        work.seeds = torch.full_like(lane.ids_t, fed.seed)
    return fed.algorithm.work_of(work).steps.tolist()


def _chunk_work(lanes: list[_Lane], chunk: list[tuple[int, int]]) -> LocalWork:
    fed = lanes[chunk[0][0]].fed
    device = fed.device
    ids = torch.tensor([lanes[k].ids[p] for k, p in chunk], device=device)
    lrs = [lanes[k].lr for k, _ in chunk]
    lr = lrs[0] if len(set(lrs)) == 1 else torch.tensor(lrs, dtype=fed.x0.dtype, device=device)[:, None]
    work = local_work(fed, ids, lanes[chunk[0][0]].cohort.round, lr)
    seeds = [lanes[k].fed.seed for k, _ in chunk]
    if any(seed != fed.clients.seed for seed in seeds):  # a lane's streams use its own seed
        work.seeds = torch.tensor(seeds, dtype=torch.int64, device=device)
    return work


def _chunk_down(lanes: list[_Lane], chunk: list[tuple[int, int]]) -> State:
    """The broadcast each client of the chunk received: one lane's as it is; entries that differ
    between lanes stacked per client ([s, ...]; a scalar as [s, 1])."""
    members = sorted({k for k, _ in chunk})
    first = lanes[members[0]].down
    if len(members) == 1:
        return first
    out = {}
    for key, value in first.items():
        if all(torch.equal(value, lanes[k].down[key]) for k in members[1:]):
            out[key] = value
        else:
            out[key] = torch.stack([lanes[k].down[key] for k, _ in chunk])
            if value.dim() == 0:
                out[key] = out[key][:, None]
    return out


def _chunk_state(lanes: list[_Lane], chunk: list[tuple[int, int]]) -> State:
    """The chunk's clients' persistent state, each from its own lane's tables."""
    fed = lanes[chunk[0][0]].fed
    members = sorted({k for k, _ in chunk})
    if len(members) == 1:
        lane = lanes[members[0]]
        return {name: t.gather([lane.ids[p] for _, p in chunk], fed.device) for name, t in lane.state.tables.items()}
    out = {}
    for name in lanes[members[0]].state.tables:
        parts = {k: lanes[k].state.tables[name].gather([lanes[k].ids[p] for kk, p in chunk if kk == k], fed.device)
                 for k in members}
        seen = {k: 0 for k in members}
        rows = []
        for k, _ in chunk:
            rows.append(parts[k][seen[k]])
            seen[k] += 1
        out[name] = torch.stack(rows)
    return out


def _by_lane(lanes: list[_Lane], chunks: list[list[tuple[int, int]]], uploads: list[State | None],
             failed: set[int] = frozenset()) -> list[State | None]:
    """Each lane's part of the chunks' uploads, in its cohort order (None for a lane with no client
    in these chunks, or one that `failed`). A lane's clients all sit in chunks of its own algorithm."""
    device = lanes[0].fed.device
    out: list[State | None] = []
    for k in range(len(lanes)):
        mine = [i for i, chunk in enumerate(chunks) if any(kk == k for kk, _ in chunk)]
        if not mine or k in failed:
            out.append(None)
            continue
        rows = [row for i in mine for row in chunks[i]]
        up = _concat([uploads[i] for i in mine])
        order = [j for _, j in sorted((p, j) for j, (kk, p) in enumerate(rows) if kk == k)]
        if order == list(range(len(rows))):
            out.append(up)
        else:
            index = torch.tensor(order, device=device)
            out.append({key: v[index] for key, v in up.items()})
    return out


def run_round(fed: Federation, state: RunState) -> tuple[float, float]:
    """One communication round in place on `state`; returns (floats down, floats up)."""
    return aggregate_round(fed, state, client_round(fed, state))


def aggregate_round(fed: Federation, state: RunState, received: ClientRound) -> tuple[float, float]:
    """The server half of a round: aggregate the uploads; returns (floats down, floats up)."""
    algo = fed.algorithm
    server = algo.aggregate(state.server, received.up, received.cohort)
    check_state(algo, "aggregate", server, fed.x0.dtype, like=state.server)
    check_model(algo, server, fed.x0)
    state.server = server
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
    on_round: Callable[[RunState, dict[str, float]], bool | None] | None = None,
    warmup: float | None = None,
) -> RunState:
    """Run rounds state.round .. fed.rounds-1. `on_round` sees every round's metrics. `warmup`:
    the seconds of a warm_up(fed, state) the caller ran already (else it runs here)."""
    state = state or initial_state(fed)

    def failed(k: int, st: RunState, exc: Exception) -> None:
        raise exc

    run_lanes([fed], [state], None if on_round is None else (lambda k, st, m: on_round(st, m)), failed, warmup)
    return state


def run_lanes(
    feds: list[Federation],
    states: list[RunState],
    on_round: Callable[[int, RunState, dict[str, float]], bool | None] | None,
    on_failure: Callable[[int, RunState, Exception], None],
    warmup: float | None = None,
) -> None:
    """Run several runs (lanes) that share their clients' data, round by round: the lanes at the
    lowest round train together (lanes_client_round), so lanes resumed at later rounds wait for the
    others to catch up. A lane that diverges, or (several lanes) whose algorithm raises, is handed to
    `on_failure` and leaves, as does a lane whose `on_round` returns False; the others go on.
    Each lane's `wall_time` is its share of the rounds it trained in (the round's time over the
    lanes in it). `warmup`: the seconds of a warm_up the caller ran already (else it runs here)."""
    failed: set[int] = set()
    live = [k for k in range(len(feds)) if states[k].round < feds[k].rounds]
    if warmup is None and live:
        warmup = warm_up(feds[live[0]], states[live[0]])
    while True:
        live = [k for k in range(len(feds)) if k not in failed and states[k].round < feds[k].rounds]
        if not live:
            return
        r = min(states[k].round for k in live)
        lanes = [k for k in live if states[k].round == r]
        t0 = time.perf_counter()
        # several lanes: what a lane's algorithm raises fails that lane (and those sharing its chunks) alone; one run:
        # it propagates, as it always did
        raised: dict[int, Exception] | None = {} if len(feds) > 1 else None
        received = lanes_client_round([feds[k] for k in lanes], [states[k] for k in lanes], failures=raised)
        diverged: dict[int, Exception] = {lanes[i]: exc for i, exc in (raised or {}).items()}
        guard = _Guard(None if raised is None else {})
        for k, got in zip(lanes, received):
            if got is None:
                continue
            fed, state = feds[k], states[k]
            with guard([k]):
                down, up = aggregate_round(fed, state, got)
                state.floats_down += down
                state.floats_up += up
                state.round += 1
                if not bool(torch.isfinite(fed.algorithm.model(state.server)).all()):
                    diverged[k] = DivergenceError(state.round, "non-finite model parameters" + blame(fed.algorithm, got.up))
            if k in guard.failed:
                diverged[k] = guard.failures[k]
        share = (time.perf_counter() - t0) / len(lanes)
        for k in lanes:
            states[k].wall_time += share
            if k in diverged:
                failed.add(k)
                on_failure(k, states[k], diverged[k])
                continue
            try:
                metrics = _round_metrics(feds[k], states[k], warmup)
            except Exception as exc:  # DivergenceError; with several lanes, anything the algorithm's metrics raise
                if not isinstance(exc, DivergenceError) and raised is None:
                    raise
                failed.add(k)
                on_failure(k, states[k], exc)
                continue
            warmup = None
            states[k].history.append(metrics)
            if on_round is not None and on_round(k, states[k], metrics) is False:
                failed.add(k)


def _round_metrics(fed: Federation, state: RunState, warmup: float | None) -> dict[str, float]:
    """The metrics of the round just trained: communication, times, the algorithm's own, and the
    evaluations due this round (their time apart, as eval_time). Raises DivergenceError on a
    non-finite loss."""
    data = fed.dataset
    x = fed.algorithm.model(state.server)
    metrics: dict[str, float] = {
        "floats_down": state.floats_down,
        "floats_up": state.floats_up,
        "wall_time": state.wall_time,
        **fed.algorithm.metrics(state.server),
    }
    if warmup is not None:  # this process's one-off start-up of the kernels, apart from wall_time
        metrics["warmup_time"] = warmup
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
    return metrics
