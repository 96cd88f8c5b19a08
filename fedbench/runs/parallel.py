"""The lane groups of a grid in worker processes (`fedbench reproduce ENTRY --jobs N`): groups that differ in
their data (a reproduction's seeds, when each seed draws its own problem) share nothing, so N of them train at
once, each in a spawned worker exactly as it would in this process (runs.batched.run_group): its runs' MLflow
records, folders and checkpoints, its own failure.

The store: every worker records its runs into the store the command names, as the jobs of a joblib sweep do.
SQLite takes one writer at a time and makes the others wait: MLflow sets `PRAGMA busy_timeout = 20000` on each
of its sessions (mlflow.store.db.utils), and a run writes in short transactions (tracking.recorder batches its
rounds; a store call takes ~20-25 ms on ext4, docs/engine.md), so a worker waits for at most the other's
transaction in progress. Measured: composite/fig2 --scale ci --jobs 2 (240 runs from two workers into one
store): no "database is locked", the comparison of --jobs 1 byte for byte. The store and the experiment are
created here, under the store's lock, before any worker starts (open_store), so no two workers race on MLflow's
schema migrations. The user's store holds exactly what the same grid run in one process records, nothing
merged afterwards.

Signals: a Ctrl-C or SIGTERM to this process is forwarded to every worker (runs.interrupts.SweepStop); each
running group checkpoints its lanes after their round and marks them KILLED, groups not started yet stay so,
and this process says where each run stopped, then exits 128 + the signal.

Errors come back as raised in the worker (a DivergenceError stays one: a diverged tuning candidate loses, as
in one process); a bug keeps its traceback as a note."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

NOT_STARTED = "not started"


def init_worker(parent: int) -> None:
    """A worker (started with the signals blocked, run_groups): passwords stay withheld from its output; it leaves
    the terminal's process group, so that a Ctrl-C reaches it once, forwarded by the parent (twice, from the
    terminal too, would stop it at once without the checkpoint of its round); a signal is ignored between groups
    (it would end the worker, and with it the pool), arm_worker(True) takes it while a group trains. A parent that
    dies (SIGKILL, out of memory) leaves no orphan writing the runs or waiting for work: stop_with_parent."""
    from fedbench.core.secrets import install
    from fedbench.runs.interrupts import arm_worker

    install()
    os.setpgrp()
    arm_worker(False)
    stop_with_parent(parent)


_PARENT = {"pid": 0, "training": False, "told": False}  # this worker's parent, whether a group trains now, and
# whether the parent's death was passed on to it


def stop_with_parent(parent: int) -> None:
    """When `parent` dies (Linux's PR_SET_PDEATHSIG, with SIGHUP): a group in training stops as on a SIGTERM (its
    lanes checkpoint after their round and are marked KILLED) and the worker exits; an idle worker, which
    would wait for work forever (a dead parent's queue never closes for it), exits at once. A parent gone
    before this: exit now. Elsewhere than Linux the worker trains its group to the end."""
    _PARENT["pid"] = parent
    if sys.platform.startswith("linux"):
        import ctypes

        signal.signal(signal.SIGHUP, _parent_died)
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0)
    if orphaned():
        os._exit(128 + signal.SIGHUP)


def orphaned() -> bool:
    """Whether the parent died. Its death signal says so first: the kernel sends it as the parent's thread exits,
    and getppid() names the dying parent until its last thread is gone (a worker that stopped its group within
    those milliseconds took the next group from the queue and trained it to the end as an orphan)."""
    return _PARENT.get("dead", False) or bool(_PARENT["pid"]) and os.getppid() != _PARENT["pid"]


def _parent_died(signum, frame):
    _PARENT["dead"] = True
    if not _PARENT["training"]:
        os._exit(128 + signum)
    if not _PARENT.get("told"):  # once: the kernel may send it again, and a second SIGTERM means "stop now"
        _PARENT["told"] = True
        os.kill(os.getpid(), signal.SIGTERM)  # the run's own handler: a checkpoint after this round, then KILLED


def portable(exc: BaseException) -> BaseException:
    """`exc` as it can travel back to the parent: a bug keeps its traceback as a note (a pickled exception loses
    it); one that does not pickle becomes a RuntimeError naming it."""
    from fedbench.core.errors import FedbenchError

    if not hasattr(exc, "__notes__") and exc.__traceback__ is not None and not isinstance(exc, FedbenchError):
        exc.add_note("in a worker process:\n" + "".join(traceback.format_exception(exc)).rstrip())
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception that cannot travel is described instead
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def train_in_worker(train: Callable, stop_file: str, members: list[tuple[Any, list[str], bool]], quiet: bool,
                    sweep: bool) -> list[Any] | tuple[str, int]:
    """One group in a worker: each job's summary or exception, as `train` (runs.api.train_group) returns them;
    once a stop was asked, (NOT_STARTED, 0) for a group that had not started, ("interrupted", signal) for one
    that stopped."""
    from fedbench.runs.interrupts import arm_worker, signal_of

    if Path(stop_file).exists():
        return (NOT_STARTED, 0)
    arm_worker(True)
    _PARENT["training"] = True
    try:
        results = train(members, quiet, sweep)
    except KeyboardInterrupt as exc:  # every lane checkpointed after its round (or stopped at once) and marked KILLED
        return ("interrupted", signal_of(exc))
    finally:
        _PARENT["training"] = False
        arm_worker(False)
        if orphaned():  # nobody to report to: the runs are recorded, the folders checkpointed
            os._exit(128 + signal.SIGTERM)
    return [portable(r) if isinstance(r, BaseException) else r for r in results]


def run_groups(train: Callable, groups: list[list[tuple[Any, list[str], bool]]], workers: int, quiet: bool,
               sweep: bool, stores: set[tuple[str, str]] = frozenset()) -> list[list[Any]]:
    """Train each group (its members: GroupJob, overrides, whether it may continue a checkpoint) with `train`, a
    module-level function that a worker imports by name (runs.api.train_group), in one of `workers` spawned
    processes; per group its results in member order (a worker that died: its exception for
    every member). `stores`: the (tracking URI, experiment) pairs the runs record into. An interrupt reports
    where each run stopped and exits 128 + the signal (SystemExit)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from fedbench.runs.interrupts import Interrupted, SweepStop, exit_code, shielded_starts, signal_of
    from fedbench.tracking.store import open_store, quiet_libraries

    quiet_libraries()
    at_once = min(workers, len(groups))
    threads = {spec.cfg.engine.get("threads") for members in groups for spec, _, _ in members}
    print(f"fedbench: {len(groups)} lane groups (runs with data of their own), {at_once} at a time in worker processes"
          + ("" if all(threads) else f"; each worker uses torch's default threads ({os.cpu_count()} cores here): "
             f"engine.threads={max(1, (os.cpu_count() or 1) // at_once)} gives each its share"), file=sys.stderr, flush=True)
    for uri, experiment in sorted(stores):  # created (and migrated) once, before any worker writes to it
        open_store(uri, experiment)
    pool = ProcessPoolExecutor(max_workers=at_once, mp_context=multiprocessing.get_context("spawn"),
                               initializer=init_worker, initargs=(os.getpid(),))
    signum = None
    with tempfile.TemporaryDirectory(prefix="fedbench-groups-") as folder:
        def pids() -> list[int]:  # the pool's live workers, which SweepStop forwards a signal to
            return [p.pid for p in (pool._processes or {}).values()]

        with SweepStop(Path(folder), workers=pids) as stop:
            futures = []
            try:
                with shielded_starts():  # a Ctrl-C to the terminal's group reaches no worker before init_worker
                    futures = [pool.submit(train_in_worker, train, str(stop.stop_file), members, quiet, sweep)
                               for members in groups]
                for future in futures:
                    future.exception()  # waits
            except KeyboardInterrupt as exc:  # a second signal (the workers stop at once), or one before any started
                signum = signal_of(exc)
                stop.ask(signum)  # groups not started stay so
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            signum = signum or stop.signum
    outcomes = [_outcome(f) for f in futures] + [(NOT_STARTED, 0)] * (len(groups) - len(futures))
    signum = signum or next((o[1] for o in outcomes if isinstance(o, tuple) and o[0] == "interrupted"), None)
    if signum is None:
        return [o if isinstance(o, list) else [o[1]] * len(members) for o, members in zip(outcomes, groups)]
    report_stopped(groups, outcomes, signum)
    raise SystemExit(exit_code(Interrupted(signum))) from None


def _outcome(future) -> list[Any] | tuple[str, Any]:
    from concurrent.futures.process import BrokenProcessPool

    if future.cancelled():
        return (NOT_STARTED, 0)
    exc = future.exception()
    if exc is None:
        return future.result()
    if isinstance(exc, BrokenProcessPool):  # killed, out of memory: every job of its group failed with it
        return ("failed", RuntimeError(f"its worker process died ({exc})"))
    return ("failed", exc)  # raised before its lanes trained (a run folder another process owns): every job's


def report_stopped(groups, outcomes, signum: int) -> None:
    """One line, then where each run of the grid stopped (its checkpoint's round and the resume command)."""
    from fedbench.runs.hydra_app import stopped_where
    from fedbench.runs.interrupts import report_where_stopped

    lines = []
    for members, outcome in zip(groups, outcomes):
        for k, (spec, _, _) in enumerate(members):
            name = spec.label or str(spec.run_dir)
            if isinstance(outcome, list):
                lines.append(f"{name}: {'failed' if isinstance(outcome[k], BaseException) else 'finished'}")
            elif outcome[0] == NOT_STARTED:
                lines.append(f"{name}: not started")
            elif outcome[0] == "failed":
                lines.append(f"{name}: failed ({outcome[1]})")
            else:
                lines.append(f"{name}: {stopped_where(spec.run_dir)}")
    report_where_stopped(signum, "run", "fedbench resume <folder> continues one", lines)
