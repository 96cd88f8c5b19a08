"""Property 2 of the design: an interrupted run resumes from its checkpoint and ends with the
metrics of an uninterrupted run, in the same MLflow run. Interrupted twice here: Ctrl-C (SIGINT,
graceful: checkpoint of the last whole round, run KILLED) and kill -9 (no warning at all)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import run_history
from tests.faultkit import SMALL, error_lines, fedbench, runs, start

ROUNDS = 300
PER_ROUND = ("test_accuracy", "test_loss", "floats_up", "floats_down")


def checkpoint_round(path: Path) -> int:
    try:
        return int(torch.load(path, weights_only=True)["round"])
    except Exception:  # not written yet
        return -1


def interrupt_after(proc, checkpoint: Path, min_round: int, sig: int, deadline: float = 240) -> int:
    """Send `sig` once the checkpoint reaches `min_round`; returns the round seen then."""
    t0 = time.monotonic()
    while (seen := checkpoint_round(checkpoint)) < min_round:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() - t0 < deadline, "no checkpoint in time"
        time.sleep(0.02)
    proc.send_signal(sig)
    return seen


@pytest.mark.slow
def test_sigint_then_kill9_then_resume_equals_uninterrupted_run(tmp_path):
    db, run_dir, ckpt = tmp_path / "m.db", tmp_path / "run", tmp_path / "run" / "checkpoint.pt"
    args = [*SMALL, f"rounds={ROUNDS}", "tracking.checkpoint_every=2", f"tracking.uri=sqlite:///{db}",
            f"hydra.run.dir={run_dir}"]

    # 1. Ctrl-C: the run ends after the current round, with a checkpoint of it, marked KILLED.
    proc = start("run", *args, cwd=tmp_path)
    interrupt_after(proc, ckpt, 2, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert len(error_lines(stderr)) == 1 and f"fedbench resume {run_dir}" in error_lines(stderr)[0]
    client, [killed] = runs(db)
    assert killed.info.status == "KILLED"
    stopped = int(killed.data.tags["failure_round"])
    assert 2 <= stopped < ROUNDS and checkpoint_round(ckpt) == stopped
    assert not list(run_dir.glob(".ckpt-*")), "a temporary checkpoint was left behind"

    # 2. Resume, then kill -9 in the middle: the MLflow run stays RUNNING, the checkpoint is whole.
    proc = start("resume", str(run_dir), cwd=tmp_path)
    seen = interrupt_after(proc, ckpt, stopped + 2, signal.SIGKILL)
    proc.communicate(timeout=60)
    _, [crashed] = runs(db)
    assert crashed.info.run_id == killed.info.run_id and crashed.info.status == "RUNNING"
    assert stopped < seen <= checkpoint_round(ckpt) < ROUNDS

    # 3. Resume again: the same MLflow run ends FINISHED, every round logged exactly once, and
    # every metric equal to an uninterrupted run's (the random streams are counter-based).
    out = fedbench("resume", str(run_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    client, [done] = runs(db)
    assert done.info.run_id == killed.info.run_id and done.info.status == "FINISHED"
    reference = run_history(*args[:-2])
    for key in PER_ROUND:
        logged = sorted((m.step, m.value) for m in client.get_metric_history(done.info.run_id, key))
        assert logged == [(h["round"], h[key]) for h in reference], key


@pytest.mark.slow
def test_kill9_then_resume_with_a_disk_client_table_equals_uninterrupted_run(tmp_path):
    """issue 35: SCAFFOLD's c_i in memory-mapped files (engine.client_state_device=disk) of a population
    made on demand; a kill -9 between checkpoints, then resume: every metric as uninterrupted."""
    db, run_dir, ckpt = tmp_path / "m.db", tmp_path / "run", tmp_path / "run" / "checkpoint.pt"
    rounds = 120
    args = ["dataset=synthetic", "dataset.generator=per_user", "dataset.num_users=300", "dataset.eval_users=20",
            "partition=natural", "num_clients=300", "clients_per_round=10", "algorithm=scaffold",
            "engine.client_state_device=disk", "local_steps=2", "local_epochs=null", "engine.threads=1",
            "tracking.artifacts=false", f"rounds={rounds}", "tracking.checkpoint_every=3",
            f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={run_dir}"]
    proc = start("run", *args, cwd=tmp_path)
    interrupt_after(proc, ckpt, 3, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert 3 <= checkpoint_round(ckpt) < rounds and (run_dir / "client_state" / "c.bin").is_file()
    out = fedbench("resume", str(run_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    client, [done] = runs(db)
    reference = run_history(*args[:-2])
    for key in PER_ROUND:
        logged = sorted((m.step, m.value) for m in client.get_metric_history(done.info.run_id, key))
        assert logged == [(h["round"], h[key]) for h in reference], key
