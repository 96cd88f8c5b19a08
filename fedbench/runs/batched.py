"""A grid trained as one program: jobs that share their data set, split and model train as lanes of
one round loop (engine.loop.run_lanes), each still a run of its own: its MLflow run, run folder,
checkpoint, skip-finished and resume, and its own failure.

Grouping (`group_key`): jobs share a group when they agree on everything the lanes share (data
set, data options, partition with partition.seed, num_clients, model, loss_scale, engine). Inside a
group, lanes whose hyperparameters are equal and only the seed differs train their clients in the
same chunks (engine.loop.mixing_key); others share the data, the rounds' loop and the process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from fedbench.config.validate import written_out
from fedbench.core.errors import ConfigError, DivergenceError
from fedbench.engine.loop import run_lanes
from fedbench.runs.build import build_lanes
from fedbench.runs.checkpoint_space import check_checkpoint_space, table_floats
from fedbench.runs.interrupts import GracefulInterrupt
from fedbench.core.memory import available_bytes
from fedbench.runs.single import Job
from fedbench.tracking.store import quiet_libraries

# what lanes share: the data, its split, the model and how rounds are computed
SHARED_KEYS = ("dataset", "data", "partition", "num_clients", "model", "loss_scale", "engine")


@dataclass
class GroupJob:
    """One job of a group: its config and where it is recorded."""

    cfg: DictConfig
    run_dir: Path
    tags: dict[str, str] = field(default_factory=dict)
    label: str = ""
    log_file: Path | None = None


def group_key(cfg: DictConfig) -> str:
    """Jobs with equal keys can train as lanes of one group."""
    container = OmegaConf.to_container(cfg, resolve=True)
    return OmegaConf.to_yaml({k: container.get(k) for k in SHARED_KEYS})


def itemsize(cfg: DictConfig) -> int:
    return 8 if str(cfg.engine.dtype) == "float64" else 4


def lane_bytes(cfg: DictConfig, dim: int) -> int:
    """A lane's memory beyond the shared data: server state and the chunk rows of its cohort
    (parameters, gradients, an algorithm's few [s, d] temporaries), ~16 vectors per client."""
    return itemsize(cfg) * dim * (16 + 16 * int(cfg.clients_per_round))


def split_groups(jobs: list[GroupJob], max_batch: int) -> list[list[int]]:
    """Job indices grouped by group_key, in order of first appearance, each group cut into pieces
    of at most `max_batch` jobs (0: no cap beyond memory, applied when the group is built)."""
    groups: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(group_key(job.cfg), []).append(i)
    out = []
    for members in groups.values():
        step = max_batch if max_batch > 0 else len(members)
        out += [members[i : i + step] for i in range(0, len(members), step)]
    return out


def run_group(jobs: list[GroupJob], quiet: bool = False, sweep: bool = True) -> list[dict[str, Any] | BaseException]:
    """Train the jobs of one group as lanes; returns per job its summary or the exception it failed
    with (a failed job never stops the others). A Ctrl-C checkpoints every lane after its current
    round, marks the runs KILLED and is raised again."""
    quiet_libraries()
    cfgs = [written_out(job.cfg) for job in jobs]
    if cfgs[0].engine.get("threads"):
        torch.set_num_threads(int(cfgs[0].engine.threads))
    try:
        built = build_lanes(cfgs)
    except Exception as exc:  # a data or model error is every job's
        return [exc] * len(jobs)
    results: list[dict[str, Any] | BaseException | None] = [None] * len(jobs)
    sessions = [Job(cfg, job.run_dir, quiet, job.tags, sweep, job.label, job.log_file) for cfg, job in zip(cfgs, jobs)]
    live = []
    try:
        for k, (session, (fed, info)) in enumerate(zip(sessions, built)):
            try:
                done = session.open(fed, info, extra_tags={"batched_lanes": str(len(jobs))})
            except Exception as exc:
                results[k] = exc
                continue
            if done is not None:
                results[k] = done
            else:
                live.append(k)
    except KeyboardInterrupt as exc:  # before round 1: the runs already started are marked KILLED
        for session in sessions:
            try:
                session.failed(exc)
            except BaseException:  # noqa: BLE001 - failed() re-raises exc
                pass
        raise
    if not live:
        return results  # type: ignore[return-value]
    interrupted: set[int] = set()

    def fail(k: int, exc: BaseException) -> None:
        try:
            sessions[k].failed(exc)
        except BaseException as raised:  # failed() re-raises as the CLI reports it
            results[k] = raised

    def on_round(k: int, state, metrics) -> bool:
        try:
            if sessions[k].on_round(state, metrics) is False:  # complete (stop_at_targets)
                return False
        except KeyboardInterrupt:  # this lane is checkpointed; the others take their turn
            interrupted.add(k)
            return False
        except Exception as exc:
            fail(k, exc)
            return False
        return True

    def on_failure(k: int, state, exc: Exception) -> None:  # a divergence, or what its algorithm raised
        fail(k, exc)

    def complete(ks: list[int]) -> None:
        """End the lanes that finished training: every lane's artifacts handed to the drawing thread first,
        drawn while the lanes' last rounds and rounds-to-target are written and checkpointed, then each
        lane's artifacts logged and its run ended (FINISHED after them). A lane that fails fails alone."""
        ks = [k for k in ks if results[k] is None]
        drawn: dict[int, Any] = {}
        try:
            for k in ks:
                try:
                    drawn[k] = sessions[k].draw()
                except Exception as exc:
                    fail(k, exc)
            saved = []
            for k in ks:
                if results[k] is None:
                    try:
                        sessions[k].save()
                        saved.append(k)
                    except Exception as exc:
                        fail(k, exc)
            for k in saved:
                try:
                    results[k] = sessions[k].finish(drawn.pop(k))
                except Exception as exc:
                    fail(k, exc)
        finally:
            for drawing in drawn.values():  # lanes that failed before their artifacts were logged
                if drawing is not None:
                    drawing.close()
            for k in ks:
                sessions[k].state.tables.clear()  # SCAFFOLD's c_i, FedADMM's y_i: gigabytes a lane for a large model

    try:  # before training: lanes whose checkpoints cannot fit on their disk fail, each with the one line
        check_checkpoint_space([(sessions[k].cfg, built[k][0], sessions[k].state, sessions[k].run_dir) for k in live])
    except ConfigError as exc:
        for k in live:
            fail(k, exc)
        return results  # type: ignore[return-value]
    fed0 = built[0][0]
    tables = max(table_floats(sessions[k].state) for k in live)
    cap = auto_max_batch(cfgs[0], fed0.flat.dim, fed0.device, table_floats=0 if fed0.client_state_disk else tables,
                         table_device=fed0.client_state_device)  # memory: lanes beyond it train in turns
    pace_flushes([sessions[k].recorder for k in live], min(cap, len(live)))
    try:
        with GracefulInterrupt(quiet) as stop:
            for k in live:
                sessions[k].stop = stop
            for start in range(0, len(live), cap):
                batch = live[start : start + cap]
                if stop.requested:
                    interrupted.update(batch)
                    continue
                for k in batch:  # its wall_time is its share of this turn's rounds
                    sessions[k].lanes = len(batch)
                run_lanes([built[k][0] for k in batch], [sessions[k].state for k in batch],
                          lambda i, st, m: on_round(batch[i], st, m),
                          lambda i, st, exc: on_failure(batch[i], st, exc))
                # recorded now, and their client tables freed for the lanes of the next turn
                complete([k for k in batch if k not in interrupted])
    except BaseException as exc:  # a bug or a second Ctrl-C: every unfinished lane ends with it
        for k in live:
            if results[k] is None:
                fail(k, exc)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return results  # type: ignore[return-value]
    for k in live:
        if k in interrupted:
            fail(k, stop.interrupt())
    complete([k for k in live if results[k] is None])
    if interrupted:
        raise stop.interrupt()
    return results  # type: ignore[return-value]


def pace_flushes(recorders: list, lanes: int) -> None:
    """The store takes a group's metrics as often as one run's: each of `lanes` lanes training at once
    writes its buffered rounds every `lanes` times a run's interval. A store call costs ~25 ms whatever
    it holds (SQLite: one transaction), so 24 lanes writing every 5 s each spent more time recording than
    training; checkpoints and the run's end still write everything buffered first."""
    for recorder in recorders:
        recorder.flush_seconds *= max(1, lanes)


def auto_max_batch(cfg: DictConfig, dim: int, device: torch.device, fraction: float = 0.5, table_floats: int = 0,
                   table_device: torch.device | None = None) -> int:
    """The lanes that fit in `fraction` of the free memory: each lane's chunk rows on `device`, and its per-client
    tables (`table_floats` per client, SCAFFOLD's c_i, FedADMM's y_i) on `table_device`, counted for every client
    since a long run visits them all (CNN 1's y_i for 1,000 clients: 6.6 GB a lane)."""
    need = {device: lane_bytes(cfg, dim)}
    table_device = table_device or device
    need[table_device] = need.get(table_device, 0) + itemsize(cfg) * int(cfg.num_clients) * table_floats
    return max(1, min(int(fraction * available_bytes(d)) // max(1, b) for d, b in need.items()))


def describe_groups(jobs: list[GroupJob], groups: Iterable[list[int]]) -> list[str]:
    """One line per group: its jobs and what its lanes differ in."""
    from fedbench.tracking.recorder import flatten_config

    lines = []
    for n, members in enumerate(groups):
        flat = [flatten_config(jobs[i].cfg) for i in members]
        varying = sorted(k for k in set().union(*flat) if len({repr(f.get(k)) for f in flat}) > 1
                         and not k.startswith(("hydra", "tracking")))
        lines.append(f"group {n}: {len(members)} job(s) "
                     f"[{', '.join(str(i) for i in members)}]" + (f", lanes differ in {', '.join(varying)}" if varying else ""))
    return lines
