"""Hydra's Ray launcher against a real Ray cluster (the shared local cluster of tests/conftest.py: a
head and a worker node on 127.0.0.1), a 3 x 3 sweep launched on it with `hydra/launcher=ray_cluster`
and recorded in a SQLite store on the shared folder, and every job found in MLflow."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.faultkit import SMALL, env, runs


@pytest.mark.slow
def test_a_sweep_on_a_ray_cluster_lands_every_run_in_mlflow(cluster, tmp_path):
    db = tmp_path / "m.db"
    cmd = [sys.executable, "-m", "fedbench.cli", "run", "-m", "hydra/launcher=ray_cluster",
           "algorithm=fedavg,fedsgd,fedprox", "seed=0,1,2", *SMALL, "rounds=3", f"tracking.uri=sqlite:///{db}",
           f"hydra.sweep.dir={tmp_path}/sweep"]
    out = subprocess.run(cmd, cwd=tmp_path, env={**env(), **cluster.exported}, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Ray Launcher is launching 9 jobs" in out.stderr + out.stdout
    client, all_runs = runs(db)
    assert len(all_runs) == 9 and {r.info.status for r in all_runs} == {"FINISHED"}
    assert len({r.info.experiment_id for r in all_runs}) == 1
    assert {(r.data.params["algorithm.name"], r.data.params["seed"]) for r in all_runs} == {
        (a, str(s)) for a in ("fedavg", "fedsgd", "fedprox") for s in range(3)}
    for r in all_runs:
        assert r.data.tags["sweep_dir"] == str(tmp_path / "sweep")
        assert [m.step for m in client.get_metric_history(r.info.run_id, "test_accuracy")] == [1, 2, 3]
    assert "(_run_job pid=" in out.stdout + out.stderr  # the jobs ran in Ray's worker processes
