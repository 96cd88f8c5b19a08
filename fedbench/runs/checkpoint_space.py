"""What runs' checkpoints will take on disk, checked before they train. A checkpoint holds the rows of the
algorithm's client tables (SCAFFOLD's c_i, FedADMM's y_i and w_i) of every client visited so far, and every run
keeps its own: a grid of large models can need more than its disk has (fedadmm/table3 --scale fmnist, 19 lanes of
CNN 1 at 1,000 clients: up to ~100 GB) and then fails its lanes at their checkpoints after hours of training."""

from __future__ import annotations

import math
import os
from pathlib import Path

from omegaconf import DictConfig

from fedbench.core.errors import ConfigError, existing_parent, free_bytes, size_text
from fedbench.engine.loop import Federation, RunState


def table_floats(state: RunState) -> int:
    """The floats of one client's rows of every client table of `state`."""
    return sum(math.prod(table.spec.shape) for table in state.tables.values())


def checkpoint_bytes(cfg: DictConfig, fed: Federation, state: RunState) -> int:
    """At most what one run's checkpoint takes for its client tables: a row of each for every client it can visit
    (min(N, rounds x cohort)); 0 without checkpoints (tracking.checkpoint_every=0) or with disk tables, whose rows
    live in the run folder's table files from the start (engine.client_state_device=disk)."""
    if not int(cfg.tracking.get("checkpoint_every") or 0) or fed.client_state_disk:
        return 0
    rows = min(fed.clients.num_clients, fed.rounds * fed.clients_per_round)
    return table_floats(state) * rows * fed.x0.element_size()


def check_checkpoint_space(runs: list[tuple[DictConfig, Federation, RunState, Path]]) -> None:
    """Refuse in one line, before training, runs (cfg, federation, state, run folder) whose checkpoints together
    cannot fit on the disk of their folders."""
    need: dict[int, list] = {}  # a disk (st_dev) -> [bytes, runs, a folder on it]
    for cfg, fed, state, run_dir in runs:
        size = checkpoint_bytes(cfg, fed, state)
        if size:
            anchor = existing_parent(run_dir)
            entry = need.setdefault(os.stat(anchor).st_dev, [0, 0, anchor])
            entry[0] += size
            entry[1] += 1
    for size, count, anchor in need.values():
        free = free_bytes(anchor)
        if free is not None and size > free:
            raise ConfigError(f"the checkpoints of {count} run(s) can take up to {size_text(size)} (their client tables: a row "
                              f"per client visited, kept by each run), and the disk of {anchor} has {size_text(free)} free: "
                              "free some space, or set tracking.checkpoint_every=0 (no checkpoints: a run stopped by a "
                              "signal still checkpoints, one that crashes starts again)")
