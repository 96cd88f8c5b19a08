"""Nothing lost, no traceback (issue 21): concurrent writers on a fresh store, one folder per run,
store failures that end the run FAILED with one line and a usable checkpoint, resume of a finished
run, and what an interrupted run leaves behind."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from fedbench.tracking import metric_rows
from tests.conftest import make_cfg, require_data
from tests.faultkit import SMALL, env, error_lines, fedbench, runs


def metric_steps(client, run_id: str, key: str = "test_accuracy") -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


@pytest.mark.slow
def test_eight_runs_started_at_once_on_a_fresh_store_all_land_in_folders_of_their_own(tmp_path):
    """Plain parallel runs (a shell loop, a scheduler): nobody prepared the SQLite store first."""
    procs = [subprocess.Popen([sys.executable, "-m", "fedbench.cli", "run", f"seed={i}", "rounds=3", *SMALL],
                              cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i in range(8)]
    for p in procs:
        assert p.wait(timeout=900) == 0, p.stderr.read()[-3000:]
    client, found = runs(tmp_path / "outputs" / "mlflow.db")
    assert sorted(r.data.params["seed"] for r in found) == [str(i) for i in range(8)]
    assert all(r.info.status == "FINISHED" and metric_steps(client, r.info.run_id) == [1, 2, 3] for r in found)
    folders = {r.data.params["seed"]: Path(r.data.tags["run_dir"]) for r in found}
    assert len(set(folders.values())) == 8
    for seed, folder in folders.items():  # each folder is its run's: resumable
        assert f"seed={seed}" in OmegaConf.load(folder / ".hydra" / "overrides.yaml")
        assert torch.load(folder / "checkpoint.pt", weights_only=True)["round"] == 3
    again = fedbench("run", "seed=9", "rounds=1", *SMALL, cwd=tmp_path)  # the store stays usable
    assert again.returncode == 0, again.stderr[-2000:]


@pytest.mark.slow
def test_sixteen_job_joblib_sweep_with_four_workers_on_a_fresh_store(tmp_path):
    out = fedbench("run", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4",
                   f"seed={','.join(map(str, range(16)))}", "rounds=2", *SMALL, cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    client, found = runs(tmp_path / "outputs" / "mlflow.db")
    assert sorted(int(r.data.params["seed"]) for r in found) == list(range(16))
    assert all(r.info.status == "FINISHED" and metric_steps(client, r.info.run_id) == [1, 2] for r in found)


def _run(tmp_path: Path, *overrides: str):
    from fedbench.runs.single import run_job

    cfg = make_cfg(f"tracking.uri=sqlite:///{tmp_path}/m.db", *SMALL, *overrides)
    return run_job(cfg, tmp_path / "run", quiet=True)


def _full_disk_after(monkeypatch, ok_calls: int, everything: bool):
    """MLflow's SQLite store on a full disk: the metrics insert raises sqlalchemy's OperationalError
    (and, with `everything`, every later write does too)."""
    from mlflow.tracking import MlflowClient
    from sqlalchemy.exc import OperationalError

    real, calls, full = MlflowClient.log_batch, [], []

    def disk_full():
        raise OperationalError("INSERT INTO metrics ...", {}, Exception("database or disk is full"))

    def log_batch(self, run_id, metrics=(), params=(), tags=(), **kw):
        if full and everything:
            disk_full()
        if metrics:
            calls.append(1)
            if len(calls) > ok_calls:
                full.append(1)
                disk_full()
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

    real_terminated = MlflowClient.set_terminated

    def set_terminated(self, *args, **kwargs):
        if full and everything:
            disk_full()
        return real_terminated(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", log_batch)
    monkeypatch.setattr(MlflowClient, "set_terminated", set_terminated)
    monkeypatch.setattr(metric_rows, "sql_store", lambda client: None)  # every write through the patched log_batch


@pytest.mark.parametrize("everything", [False, True], ids=["metrics-table-full", "whole-store-full"])
def test_a_full_disk_under_the_store_ends_the_run_with_one_line_and_a_usable_checkpoint(tmp_path, monkeypatch,
                                                                                        everything):
    from fedbench.tracking.store import StoreError

    _full_disk_after(monkeypatch, ok_calls=2, everything=everything)  # rounds are flushed at each checkpoint
    with pytest.raises(StoreError) as info:
        _run(tmp_path, "rounds=6", "tracking.checkpoint_every=1")
    message = str(info.value)
    assert "\n" not in message and "database or disk is full" in message and "fedbench resume" in message
    assert f"no space left on the disk of {tmp_path} (" in message and " free)" in message  # issue 32
    assert info.value.exit_code == 1
    assert ("stays RUNNING" in message) == everything
    monkeypatch.undo()
    [run] = runs(tmp_path / "m.db")[1]
    assert run.info.status == ("RUNNING" if everything else "FAILED")
    # the checkpoint never claims a round the record lacks: resuming completes the record exactly once
    _run(tmp_path, "rounds=6", "tracking.checkpoint_every=1", "resume=true")
    client, [run] = runs(tmp_path / "m.db")
    assert run.info.status == "FINISHED" and metric_steps(client, run.info.run_id) == list(range(1, 7))
    assert "failure_round" not in run.data.tags and "failure_reason" not in run.data.tags


def test_a_tracking_server_that_dies_mid_run_ends_it_with_one_line(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from fedbench.tracking.store import StoreError

    real, calls = MlflowClient.log_batch, []

    def log_batch(self, run_id, metrics=(), **kw):
        if metrics:
            calls.append(1)
            if len(calls) > 2:
                raise MlflowException("API request to endpoint /api/2.0/mlflow/runs/log-batch failed with exception "
                                      "HTTPConnectionPool(host='127.0.0.1', port=5000): Max retries exceeded\n(...)")
        return real(self, run_id, metrics=metrics, **kw)

    monkeypatch.setattr(MlflowClient, "log_batch", log_batch)
    monkeypatch.setattr(metric_rows, "sql_store", lambda client: None)  # a server's store: log_batch over HTTP
    with pytest.raises(StoreError, match="Max retries exceeded.*the run stopped at round 3.*fedbench resume") as info:
        _run(tmp_path, "rounds=5", "tracking.checkpoint_every=1")
    assert "\n" not in str(info.value)


def test_resuming_a_finished_run_logs_nothing_again(tmp_path):
    first = _run(tmp_path, "rounds=3", "targets=[0.1]")
    client, [run] = runs(tmp_path / "m.db")
    before = (client.get_metric_history(run.info.run_id, "rounds_to_0.1"), client.list_artifacts(run.info.run_id),
              run.info.end_time)
    again = _run(tmp_path, "rounds=3", "targets=[0.1]", "resume=true")
    assert again["run_id"] == first["run_id"] and again["final_accuracy"] == pytest.approx(first["final_accuracy"])
    client, [run] = runs(tmp_path / "m.db")
    after = (client.get_metric_history(run.info.run_id, "rounds_to_0.1"), client.list_artifacts(run.info.run_id),
             run.info.end_time)
    assert [m.value for m in after[0]] == [m.value for m in before[0]] and len(after[0]) == 1
    assert [a.path for a in after[1]] == [a.path for a in before[1]] and after[2] == before[2]
    assert run.info.status == "FINISHED"


def test_an_orphan_temporary_checkpoint_is_removed_and_checkpoints_follow_the_umask(tmp_path):
    _run(tmp_path, "rounds=2")
    orphan = tmp_path / "run" / ".ckpt-k1ll3d_0.tmp"  # what a SIGKILL during a checkpoint write leaves (mkstemp: 8 characters)
    orphan.write_bytes(b"half")
    _run(tmp_path, "rounds=2", "resume=true")
    assert not orphan.exists()
    old = os.umask(0o022)
    try:
        (tmp_path / "run" / "checkpoint.pt").unlink()
        _run(tmp_path, "rounds=2", "seed=5")
    finally:
        os.umask(old)
    assert (tmp_path / "run" / "checkpoint.pt").stat().st_mode & 0o777 == 0o644


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_a_run_refused_after_hydra_starts_leaves_no_folder(tmp_path):
    """Data missing (found only when the data set is built): Hydra already made the run folder."""
    out = fedbench("run", "dataset=mnist", f"data.root={tmp_path}/none", f"hydra.run.dir={tmp_path}/runs/a", cwd=tmp_path)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert not (tmp_path / "runs" / "a").exists()
    # a folder with the user's own files is never removed
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    out = fedbench("run", "dataset=mnist", f"data.root={tmp_path}/none", f"hydra.run.dir={tmp_path}/mine", cwd=tmp_path)
    assert out.returncode == 2 and (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_a_partial_data_folder_is_named_before_falling_back(tmp_path):
    from tests.data.test_data import write_mnist_like

    folder = tmp_path / "data" / "fmnist"
    write_mnist_like(folder)
    (folder / "t10k-labels-idx1-ubyte").unlink()
    from fedbench.data.locations import DEBIAN_FASHION_MNIST

    require_data(DEBIAN_FASHION_MNIST.is_dir(), "needs Debian's dataset-fashion-mnist")
    proc = subprocess.run([sys.executable, "-c", "from fedbench.data.datasets import fmnist; "
                           f"print(len(fmnist(root={str(tmp_path / 'data')!r}).y_train))"],
                          env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["60000"]
    assert f"fmnist: {folder} lacks t10k-labels-idx1-ubyte[.gz]; reading {DEBIAN_FASHION_MNIST} instead" in proc.stderr


def test_report_counts_a_configuration_that_finished_twice_as_one_seed(tmp_path):
    from fedbench.tracking.report import build_table, load_runs

    for skip in ("true", "false"):
        _run(tmp_path, "rounds=2", "seed=0", f"tracking.skip_finished={skip}")
        (tmp_path / "run" / "checkpoint.pt").unlink()
    _run(tmp_path, "rounds=2", "seed=1")
    frame = load_runs(f"sqlite:///{tmp_path}/m.db", "fedbench")
    assert len(runs(tmp_path / "m.db")[1]) == 3 and len(frame) == 2
    assert build_table(frame, ["dataset.name"], None, None, None)["seeds"].tolist() == [2]
