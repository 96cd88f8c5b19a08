"""The multi-machine path for real (issue 23), on scripts/local_cluster.sh's cluster: a Ray head and
a worker node, an MLflow server on PostgreSQL, all on 127.0.0.1. A sweep's every job lands in
PostgreSQL through the server; a worker node that dies mid-sweep and a server that stops mid-run
lose nothing and log nothing twice."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.clusterkit import wait_until
from tests.faultkit import SMALL, env, error_lines, fedbench

pytestmark = pytest.mark.slow


def sweep_on(cluster, tmp_path: Path, experiment: str, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "fedbench.cli", "run", "-m", "hydra/launcher=ray_cluster", *SMALL, *overrides,
            f"tracking.uri={cluster.mlflow_uri}", f"tracking.experiment={experiment}",
            f"hydra.sweep.dir={tmp_path}/sweep"]


def cluster_env(cluster) -> dict[str, str]:
    """A shell that sourced the cluster's DIR/env (RAY_ADDRESS, Ray's loopback mode, PGPASSWORD)."""
    return {**env(), **cluster.exported}


def launch(cluster, tmp_path: Path, cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=tmp_path, env=cluster_env(cluster), capture_output=True, text=True, timeout=timeout)


def steps_in_postgres(cluster, experiment: str, key: str = "test_accuracy") -> dict[str, list[int]]:
    """Each run's logged steps of `key`, read from the database behind the server (duplicates kept)."""
    rows = cluster.sql(
        "SELECT r.run_uuid, m.step FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
        "JOIN metrics m ON m.run_uuid = r.run_uuid WHERE e.name = %s AND m.key = %s ORDER BY m.step", experiment, key)
    out: dict[str, list[int]] = {}
    for run_id, step in rows:
        out.setdefault(run_id, []).append(int(step))
    return out


def test_a_sweep_on_the_cluster_lands_in_postgresql_through_the_server(cluster, tmp_path):
    out = launch(cluster, tmp_path, sweep_on(cluster, tmp_path, "cluster_sweep", "algorithm=fedavg,fedsgd", "seed=0,1",
                                            "rounds=3", "tracking.artifacts=true"))
    assert out.returncode == 0, out.stderr[-4000:]
    assert "Ray Launcher is launching 4 jobs" in out.stdout + out.stderr
    assert "(_run_job pid=" in out.stdout + out.stderr  # the jobs ran in Ray's worker processes
    client, found = cluster.client(), cluster.runs("cluster_sweep")
    assert len(found) == 4 and {r.info.status for r in found} == {"FINISHED"}
    assert {(r.data.params["algorithm.name"], r.data.params["seed"]) for r in found} == {
        (a, s) for a in ("fedavg", "fedsgd") for s in ("0", "1")}
    sweep = tmp_path / "sweep"
    for r in found:
        tags, run_id = r.data.tags, r.info.run_id
        assert tags["sweep_dir"] == str(sweep) and tags["sweep_job"] in {"0", "1", "2", "3"}
        assert f"algorithm={r.data.params['algorithm.name']}" in tags["overrides"] and len(tags["config_hash"]) == 16
        run_dir = Path(tags["run_dir"])  # the shared sweep folder holds every job's folder and checkpoint
        assert run_dir.parent == sweep and torch.load(run_dir / "checkpoint.pt", weights_only=True)["round"] == 3
        for key in ("test_accuracy", "test_loss", "floats_up", "wall_time"):
            assert [m.step for m in client.get_metric_history(run_id, key)] == [1, 2, 3], key
        assert {a.path for a in client.list_artifacts(run_id)} == {"config.yaml", "metrics.csv", "curves.png"}
        # the artifacts went through the server into its artifact folder
        stored = cluster.dir / "artifacts" / r.info.experiment_id / run_id / "artifacts"
        assert sorted(p.name for p in stored.iterdir()) == ["config.yaml", "curves.png", "metrics.csv"]
        assert (stored / "metrics.csv").read_text().count("\n") == 4  # a header and three rounds
    # and the record is PostgreSQL's: every run, every round once, its tags
    in_db = cluster.sql("SELECT r.run_uuid, r.status FROM runs r JOIN experiments e ON r.experiment_id = "
                        "e.experiment_id WHERE e.name = %s", "cluster_sweep")
    assert sorted(in_db) == sorted((r.info.run_id, "FINISHED") for r in found)
    assert steps_in_postgres(cluster, "cluster_sweep") == {r.info.run_id: [1, 2, 3] for r in found}
    tagged = cluster.sql("SELECT run_uuid, value FROM tags WHERE key = 'sweep_dir' AND run_uuid = ANY(%s)",
                         [r.info.run_id for r in found])
    assert sorted(tagged) == sorted((r.info.run_id, str(sweep)) for r in found)


RESUMED = re.compile(r"\[job (\d+)\] resuming MLflow run (\w+) from round (\d+)")
SKIPPED = re.compile(r"\[job (\d+)\] skipped, this configuration FINISHED as MLflow run (\w+)")


def test_a_worker_node_killed_mid_sweep_loses_nothing_and_logs_nothing_twice(cluster, tmp_path):
    """Without Ray's retries (hydra.launcher.ray.remote.max_retries=0) the sweep fails when the worker node
    dies; relaunching it, every job FINISHED once, the interrupted one continued from its checkpoint in its
    MLflow run, and every round is in the record once. (Ray's retries, its default, re-run the task, which
    continues from the checkpoint by the same path.)"""
    rounds, every = 1000, 10
    experiment = "worker_killed"
    cmd = sweep_on(cluster, tmp_path, experiment, "seed=0,1", f"rounds={rounds}", f"tracking.checkpoint_every={every}",
                   "+hydra.launcher.ray.remote.max_retries=0")
    sweep = tmp_path / "sweep"
    cluster.wait_idle()  # each job needs a node's one CPU: both nodes up, neither busy
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=cluster_env(cluster), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        # a job's process takes Ray's task title when its task starts: wait for it, not only for the checkpoints
        try:
            wait_until(lambda: len(list(sweep.glob("*/checkpoint.pt"))) == 2 and cluster.worker_task_pids(), 180,
                       "both jobs' first checkpoints and a job on the worker node", proc)
        except AssertionError as exc:  # what ran where: Ray's processes (pid, group, title) and the nodes' groups
            groups = {n: (cluster.dir / f"ray-{n}.pid").read_text().strip() for n in ("head", "worker")}
            raise AssertionError(f"{exc}; Ray's processes {cluster.ray_processes()}, node groups {groups}") from None
        cluster.kill_worker()
        first, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    cluster.restore()  # the machine comes back (for the relaunch and the next tests)
    assert proc.returncode != 0, first[-3000:]
    finished_before = {r.info.run_id for r in cluster.runs(experiment) if r.info.status == "FINISHED"}
    again = launch(cluster, tmp_path, cmd)
    assert again.returncode == 0, again.stderr[-4000:]
    output = first + again.stdout + again.stderr
    resumed = RESUMED.findall(output)
    assert resumed, "no job continued from a checkpoint"
    assert all(int(r) >= every and int(r) % every == 0 for _, _, r in resumed), resumed
    skipped = {run_id for _, run_id in SKIPPED.findall(again.stdout + again.stderr)}
    assert skipped == finished_before  # relaunching skips exactly the jobs that had finished
    found = cluster.runs(experiment)
    assert len(found) == 2 and {r.info.status for r in found} == {"FINISHED"}
    assert {run_id for _, run_id, _ in resumed} <= {r.info.run_id for r in found}  # the same run, continued
    assert steps_in_postgres(cluster, experiment) == {r.info.run_id: list(range(1, rounds + 1)) for r in found}


def test_an_mlflow_server_stopped_mid_run_ends_it_with_one_line_then_resume_completes_it(cluster, tmp_path):
    rounds, every = 1000, 10
    run_dir = tmp_path / "run"
    overrides = [*SMALL, f"rounds={rounds}", f"tracking.checkpoint_every={every}", "tracking.experiment=server_stopped"]
    cmd = [sys.executable, "-m", "fedbench.cli", "run", *overrides, f"tracking.uri={cluster.mlflow_uri}",
           f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (run_dir / "checkpoint.pt").exists(), 180, "the run's first checkpoint", proc)
        cluster.stop("mlflow")
        _, err = proc.communicate(timeout=120)  # MLflow's own retries would take many minutes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err[-3000:]
    [line] = error_lines(err)
    assert "Traceback" not in err and f"continue from the last checkpoint with: fedbench resume {run_dir}" in line
    stopped_at = int(re.search(r"the run stopped at round (\d+)", line).group(1))
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert every <= checkpoint["round"] <= stopped_at < rounds
    cluster.start("mlflow")
    [run] = cluster.runs("server_stopped")
    if "stays RUNNING" in line:  # the server was gone when the run tried to mark it: the line says so
        assert run.info.status == "RUNNING"
    else:
        assert run.info.status == "FAILED" and run.data.tags["failure_round"] == str(stopped_at)
    resumed = fedbench("resume", str(run_dir), cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming MLflow run {run.info.run_id} from round {checkpoint['round']}" in resumed.stderr
    [run] = cluster.runs("server_stopped")
    assert run.info.status == "FINISHED" and "failure_round" not in run.data.tags
    assert steps_in_postgres(cluster, "server_stopped") == {run.info.run_id: list(range(1, rounds + 1))}
    # the resumed run's record is an uninterrupted run's
    alone = fedbench("run", *overrides, f"tracking.uri=sqlite:///{tmp_path}/alone.db", f"hydra.run.dir={tmp_path}/alone",
                     cwd=tmp_path, timeout=300)
    assert alone.returncode == 0, alone.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    local = MlflowClient(f"sqlite:///{tmp_path}/alone.db")
    [reference] = local.search_runs([local.get_experiment_by_name("server_stopped").experiment_id])
    def history(client, run_id):
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, "test_accuracy"))

    assert history(cluster.client(), run.info.run_id) == history(local, reference.info.run_id)


def test_a_batched_grid_goes_to_the_cluster_one_ray_task_per_group(cluster, tmp_path):
    """hydra/launcher=batched_ray: the grid's groups each train as one Ray task; every
    job is still its own run in PostgreSQL, and the same run as the batched launcher trains in one process."""
    grid = [*SMALL, "algorithm=fedavg,fedprox", "seed=0,1", "rounds=3", "tracking.experiment=batched_ray",
            "hydra.launcher.max_batch=2"]  # two groups of two lanes
    out = launch(cluster, tmp_path, [sys.executable, "-m", "fedbench.cli", "run", "-m", "hydra/launcher=batched_ray", *grid,
                                     f"tracking.uri={cluster.mlflow_uri}", f"hydra.sweep.dir={tmp_path}/sweep"])
    assert out.returncode == 0, out.stderr[-4000:]
    shown = out.stdout + out.stderr
    assert f"4 job(s) in 2 group(s) as Ray tasks on {cluster.ray_address}" in shown
    assert shown.count("(group_task pid=") >= 2  # the groups trained in Ray's worker processes (launch.group_task)
    found = cluster.runs("batched_ray")
    assert len(found) == 4 and {r.info.status for r in found} == {"FINISHED"}
    assert {r.data.tags["batched_lanes"] for r in found} == {"2"}
    assert steps_in_postgres(cluster, "batched_ray") == {r.info.run_id: [1, 2, 3] for r in found}
    here = fedbench("run", "-m", "hydra/launcher=batched", *grid, f"tracking.uri=sqlite:///{tmp_path}/here.db",
                    f"hydra.sweep.dir={tmp_path}/here", cwd=tmp_path, timeout=300)
    assert here.returncode == 0, here.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    local = MlflowClient(f"sqlite:///{tmp_path}/here.db")

    def histories(client, runs):
        return {(r.data.params["algorithm.name"], r.data.params["seed"]):
                [m.value for m in sorted(client.get_metric_history(r.info.run_id, "test_accuracy"), key=lambda m: m.step)]
                for r in runs}

    assert histories(cluster.client(), found) == histories(
        local, local.search_runs([local.get_experiment_by_name("batched_ray").experiment_id]))
