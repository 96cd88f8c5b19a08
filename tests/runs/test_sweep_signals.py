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
    cluster.wait_idle()  # two tasks train, one on each node
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
    cluster.wait_idle()  # two tasks train, one on each node
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


@pytest.mark.slow  # Ray (issue 43: `pytest -m "not slow"` is the quick loop)
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


def _blocked_in_this_worker() -> list[int]:
    import signal as signals

    return sorted(int(s) for s in signals.pthread_sigmask(signals.SIG_BLOCK, []))


@pytest.mark.slow  # a joblib pool of processes, 7 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_a_terminal_ctrl_c_does_not_reach_a_joblib_worker_before_its_job_arms_it():
    """A terminal's Ctrl-C goes to the whole foreground group: a loky worker still starting (importing torch to
    unpickle its job) died of the KeyboardInterrupt, and the parent printed joblib's BrokenProcessPool through Hydra
    and exited 1 (3 of 9 Ctrl-Cs at 4.5-5.5 s into a 3-job sweep). Loky's workers start with SIGINT and SIGTERM
    blocked (interrupts.shield_joblib_workers) until a job arms them (arm_worker unblocks them)."""
    from joblib import Parallel, delayed
    from joblib.externals.loky import get_reusable_executor

    from fedbench.runs import interrupts

    wanted = sorted(int(s) for s in interrupts.SIGNALS)
    get_reusable_executor().shutdown(wait=True)  # workers made before the shield
    plain = Parallel(n_jobs=2, backend="loky")(delayed(_blocked_in_this_worker)() for _ in range(2))
    assert all(not set(wanted) & set(mask) for mask in plain)  # without it: taken at once
    get_reusable_executor().shutdown(wait=True)
    interrupts.shield_joblib_workers()
    interrupts.shield_joblib_workers()  # once is enough; twice changes nothing
    try:
        shielded = Parallel(n_jobs=2, backend="loky")(delayed(_blocked_in_this_worker)() for _ in range(2))
        assert all(set(wanted) <= set(mask) for mask in shielded)
        assert not set(wanted) & set(_blocked_in_this_worker())  # the parent's own mask is as it was
    finally:
        from joblib.externals.loky.backend import fork_exec

        fork_exec.fork_exec = fork_exec.fork_exec.__wrapped__
        get_reusable_executor().shutdown(wait=True)


ARMED_LATE = """
import os, signal
from fedbench.runs import interrupts
signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.SIGNALS)  # as a shielded worker starts
os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C while it started: pending
print("pending", signal.SIGINT in signal.sigpending(), flush=True)
try:
    interrupts.arm_worker(True)
    print("not taken")
except interrupts.Interrupted as exc:
    print("taken", interrupts.signal_of(exc) == signal.SIGINT)
"""


def test_a_signal_that_came_while_the_worker_started_is_taken_when_its_job_arms_it():
    out = subprocess.run([sys.executable, "-c", ARMED_LATE], capture_output=True, text=True, timeout=120, env=env())
    assert out.stdout.split("\n")[:2] == ["pending True", "taken True"], out.stdout + out.stderr[-2000:]


LATE_EXIT = """
import threading, time
from fedbench.cli.app import exit_now
from fedbench.runs import interrupts
interrupts.install()
threading.Thread(target=time.sleep, args=(3,)).start()  # a pool's thread the exit waits for (loky's manager)
print("exiting", flush=True)
exit_now(0)
"""


def test_a_signal_while_the_command_exits_ends_it_with_its_status_and_no_traceback():
    """A Ctrl-C after a joblib sweep ended, while the exit waited for loky's threads, printed an `Exception ignored`
    traceback of Interrupted from the thread join (exit 0, 2 of 6 Ctrl-Cs at 9.5-12 s)."""
    proc = subprocess.Popen([sys.executable, "-c", LATE_EXIT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env())
    assert proc.stdout.readline() == "exiting\n"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err and "Exception ignored" not in err, err[-2000:]


def test_a_spawned_pool_started_in_shielded_starts_takes_no_signal_before_its_worker_arms_itself():
    """runs.parallel's workers (`fedbench reproduce --jobs N`) are spawned inside shielded_starts: a Ctrl-C to the
    terminal's group while one still imports reaches no worker; init_worker then leaves the group and ignores it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from fedbench.runs import interrupts

    wanted = {int(s) for s in interrupts.SIGNALS}
    for shielded in (False, True):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            with interrupts.shielded_starts() if shielded else contextlib.nullcontext():
                future = pool.submit(_blocked_in_this_worker)
            assert (wanted <= set(future.result(timeout=120))) == shielded
    assert not wanted & set(_blocked_in_this_worker())
