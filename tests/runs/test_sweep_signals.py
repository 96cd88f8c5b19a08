"""Signals reach every process that trains (issue 42, section 6): SIGTERM to a joblib sweep is forwarded to
its workers, each checkpoints its run, and the parent says which job stopped at which round and how to
continue it; SIGTERM to the batched launcher names every job it stopped; SIGTERM to a sweep whose jobs are
Ray tasks (Hydra's Ray launcher, the batched launcher's Ray path) reaches the tasks through the sweep's stop file,
and each checkpoints its run."""

from __future__ import annotations

import contextlib
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faultkit import SMALL, env, error_lines, runs, start
from tests.runs.test_resume import checkpoint_round


def wait_for_running(db: Path, proc, count: int, deadline: float = 300) -> None:
    """Until the store holds `count` RUNNING runs, and each has logged a round (read without MLflow)."""
    t0 = time.monotonic()
    query = ("SELECT count(DISTINCT r.run_uuid) FROM runs r JOIN metrics m ON m.run_uuid = r.run_uuid "
             "WHERE r.status = 'RUNNING'")
    while True:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() - t0 < deadline, "the runs did not start in time"
        if db.exists():
            try:
                with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as con:
                    if con.execute(query).fetchone()[0] >= count:
                        return
            except sqlite3.Error:
                pass
        time.sleep(0.1)


def job_lines(stderr: str) -> dict[int, str]:
    return {int(m.group(1)): line for line in stderr.splitlines() if (m := re.match(r"  job (\d+) \(", line))}


@pytest.mark.slow
def test_sigterm_to_a_joblib_sweep_checkpoints_every_running_job_and_names_each(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    db, sweep = tmp_path / "m.db", tmp_path / "sweep"
    proc = start("run", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1,2", *SMALL, "rounds=20000",
                 "tracking.checkpoint_every=0", f"tracking.uri=sqlite:///{db}", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    wait_for_running(db, proc, 2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 143, stderr[-3000:]
    [line] = error_lines(stderr)
    assert "interrupted (SIGTERM)" in line, line
    jobs = job_lines(stderr)
    assert sorted(jobs) == [0, 1, 2], stderr[-3000:]
    assert jobs[2].endswith("not started")  # queued when the stop came: it never started
    assert len(stopped_rounds(db, jobs)) == 2  # the workers stopped: none finished
    assert not (sweep / ".fedbench-stop").exists()


@pytest.mark.slow
def test_sigterm_to_the_batched_launcher_names_every_job(tmp_path):
    db, sweep = tmp_path / "m.db", tmp_path / "sweep"
    proc = start("run", "-m", "hydra/launcher=batched", "seed=0,1", *SMALL, "rounds=20000",
                 "tracking.checkpoint_every=0", f"tracking.uri=sqlite:///{db}", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    wait_for_running(db, proc, 2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 143, stderr[-3000:]
    [line] = error_lines(stderr)
    jobs = job_lines(stderr)
    assert sorted(jobs) == [0, 1], stderr[-3000:]
    stopped_rounds(db, jobs)


def test_the_sweep_parent_forwards_the_first_signal_and_stops_at_the_second(tmp_path, monkeypatch):
    """runs.interrupts.SweepStop: the first signal leaves the stop file and reaches every worker; the parent
    goes on waiting; the second reaches them again and ends the parent."""
    import os

    from fedbench.runs import interrupts

    sent = []
    monkeypatch.setattr(interrupts.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    with interrupts.SweepStop(tmp_path, workers=lambda: [11, 12]) as stop:
        assert os.environ[interrupts.STOP_ENV] == f"{os.getpid()}:{tmp_path / '.fedbench-stop'}"
        stop._handler(signal.SIGTERM, None)
        assert sent == [(11, signal.SIGTERM), (12, signal.SIGTERM)] and (tmp_path / ".fedbench-stop").exists()
        with pytest.raises(interrupts.Interrupted):
            stop._handler(signal.SIGINT, None)
        assert sent[2:] == [(11, signal.SIGINT), (12, signal.SIGINT)]
    assert interrupts.STOP_ENV not in os.environ and not (tmp_path / ".fedbench-stop").exists()
    assert interrupts.sweep_stop_file() is None
    with interrupts.SweepStop(tmp_path, workers=lambda: []) as stop:  # jobs in this process: interrupted here
        with pytest.raises(interrupts.Interrupted):
            stop._handler(signal.SIGTERM, None)
        assert stop.signum is None and not (tmp_path / ".fedbench-stop").exists()


def start_on(cluster, *args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fedbench.cli", *args], cwd=cwd, env={**env(), **cluster.exported},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stopped_rounds(db: Path, jobs: dict[int, str]) -> set[int]:
    """Every run of the record KILLED at the round of its checkpoint, named with it and its resume command;
    the job numbers of those runs."""
    _, record = runs(db)
    nums = set()
    for r in record:
        run_dir = Path(r.data.tags["run_dir"])
        stopped = checkpoint_round(run_dir / "checkpoint.pt")
        assert r.info.status == "KILLED" and 1 <= stopped == int(r.data.tags["failure_round"]) < 20000
        assert jobs[int(run_dir.name)].endswith(f"stopped at round {stopped}; continue with: fedbench resume {run_dir}"), \
            jobs[int(run_dir.name)]
        nums.add(int(run_dir.name))
    return nums


@pytest.mark.slow
def test_sigterm_to_a_ray_launcher_sweep_checkpoints_every_ray_task_and_names_each(cluster, tmp_path):
    """Two Ray nodes of one CPU: two jobs train as Ray tasks, the third waits in Ray's queue."""
    db, sweep = tmp_path / "m.db", tmp_path / "sweep"
    proc = start_on(cluster, "run", "-m", "hydra/launcher=ray_cluster", "seed=0,1,2", *SMALL, "rounds=20000",
                    "tracking.checkpoint_every=0", f"tracking.uri=sqlite:///{db}", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    wait_for_running(db, proc, 2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr[-3000:]
    [line] = error_lines(stderr)
    assert "interrupted (SIGTERM)" in line, line
    jobs = job_lines(stderr)
    assert sorted(jobs) == [0, 1, 2], stderr[-3000:]
    trained = stopped_rounds(db, jobs)
    assert len(trained) == 2  # the tasks stopped: none finished its 20,000 rounds
    [queued] = {0, 1, 2} - trained
    assert jobs[queued].endswith("not started"), jobs[queued]
    assert not (sweep / ".fedbench-stop").exists()


@pytest.mark.slow
def test_sigterm_to_the_batched_launcher_on_ray_checkpoints_every_group(cluster, tmp_path):
    """One job a group (max_batch=1): two groups train as Ray tasks, the third waits in Ray's queue."""
    db, sweep = tmp_path / "m.db", tmp_path / "sweep"
    proc = start_on(cluster, "run", "-m", "hydra/launcher=batched_ray", "hydra.launcher.max_batch=1", "seed=0,1,2",
                    *SMALL, "rounds=20000", "tracking.checkpoint_every=0", f"tracking.uri=sqlite:///{db}",
                    f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    wait_for_running(db, proc, 2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr[-3000:]
    [line] = error_lines(stderr)
    assert "interrupted (SIGTERM)" in line, line
    jobs = job_lines(stderr)
    assert sorted(jobs) == [0, 1, 2], stderr[-3000:]
    trained = stopped_rounds(db, jobs)
    assert len(trained) == 2
    [queued] = {0, 1, 2} - trained
    assert jobs[queued].endswith("stopped before its first checkpoint; nothing was checkpointed"), jobs[queued]
    assert not (sweep / ".fedbench-stop").exists()


def test_a_ray_task_takes_each_signal_written_in_the_stop_file(tmp_path, monkeypatch):
    """runs.interrupts.StopWatch: the parent's first signal, written in the stop file, runs the task's handler for
    it (GracefulInterrupt's: checkpoint after the round), the second one too; the task's own handlers come back."""
    from fedbench.runs import interrupts

    stop_file = tmp_path / ".fedbench-stop"
    before = signal.getsignal(signal.SIGTERM)
    got = []
    with interrupts.StopWatch(stop_file, poll=0.01):
        with pytest.raises(interrupts.Interrupted) as raised:  # outside training: an interrupt at once
            stop_file.write_text(f"{int(signal.SIGTERM)}\n")
            time.sleep(5)
        assert raised.value.signum == signal.SIGTERM
        signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))  # training: GracefulInterrupt's
        with stop_file.open("a") as f:
            f.write(f"{int(signal.SIGINT)}\n")
        t0 = time.monotonic()
        while not got and time.monotonic() - t0 < 5:
            time.sleep(0.01)
        assert got == [signal.SIGINT]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_worker_still_starting_is_not_sent_the_signal_it_would_die_of(tmp_path):
    """SIGTERM 4.5-5.7 s into a joblib sweep reached workers still starting (SIGTERM at its default): they died, and
    the parent printed joblib's TerminatedWorkerError through Hydra and exited 1. A worker is sent the signal once
    it takes it; before, it finds the stop file when its job starts."""
    from fedbench.runs import interrupts

    starting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    armed = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\nprint('armed', flush=True)\n"
                              "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert armed.stdout.readline() == "armed\n"
        assert not interrupts.takes_signal(starting.pid, signal.SIGTERM)
        assert interrupts.takes_signal(armed.pid, signal.SIGTERM)
        stop = interrupts.SweepStop(tmp_path, workers=lambda: [starting.pid, armed.pid])
        assert stop.forward(signal.SIGTERM) == 2
        assert armed.wait(timeout=30) == 7  # its handler ran
        time.sleep(0.2)
        assert starting.poll() is None  # alive: it would have died of it
    finally:
        for proc in (starting, armed):
            proc.kill()
            proc.wait()
