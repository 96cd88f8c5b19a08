"""The command line and the MLflow record: read back what a run wrote; bad input stops early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def fedbench(*args: str, cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "fedbench.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _runs(db: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exps = client.search_experiments()
    return client, [r for e in exps for r in client.search_runs([e.experiment_id])]


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_run_records_params_metrics_and_rounds_to_target(tmp_path):
    db = tmp_path / "m.db"
    # a bad interpolation overridden later on the same line is a valid command (the last value wins)
    out = fedbench("run", "rounds=6", "targets=[0.5,0.99]", f"tracking.uri=sqlite:///{db}", "eta_g=${oops}",
                   "eta_g=1.0", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    client, runs = _runs(db)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert "eta_g=${oops} eta_g=1.0" in run.data.tags["overrides"]  # recorded as typed
    assert run.data.params["algorithm.name"] == "fedavg"
    assert run.data.params["rounds"] == "6"
    assert len(run.data.tags["partition_fingerprint"]) == 12
    history = client.get_metric_history(run.info.run_id, "test_accuracy")
    assert sorted(m.step for m in history) == [1, 2, 3, 4, 5, 6]
    reached = run.data.tags["rounds_to_0.5"]
    first = min(m.step for m in history if m.value >= 0.5)
    assert reached == str(first)
    assert run.data.metrics["rounds_to_0.5"] == first
    assert run.data.tags["rounds_to_0.99"] == ">6"
    assert "rounds_to_0.99" not in run.data.metrics
    ups = client.get_metric_history(run.info.run_id, "floats_up")
    d = 650  # mclr on digits: 64 * 10 + 10
    assert max(m.value for m in ups) == 6 * 10 * d  # 10 clients per round upload d floats each
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "metrics.csv", "curves.png"} <= arts
    assert "MLflow run" in out.stdout and run.info.run_id in out.stdout
    # the summary says where the run is (what `fedbench resume` takes) and what it left in MLflow (issue 33)
    assert f"run folder           {tmp_path}/run" in out.stdout
    assert "artifacts            config.yaml, metrics.csv, curves.png in " + run.info.artifact_uri in out.stdout
    from fedbench.tracking.recorder import package_version

    assert run.data.tags["fedbench_version"] == run.data.params["fedbench_version"] == package_version()


@pytest.mark.parametrize("override,needle", [
    ("algorithm=fedavgg", "Did you mean 'fedavg'"),
    ("clients_per_round=50", "clients_per_round=50 exceeds num_clients=20"),
    ("partition.alpha=0", "partition.alpha must be a finite number > 0"),
    ("eta_l=-1", "eta_l must be a finite number > 0"),
    ("dataset=mnist", "mnist not found"),
    ("targets=[1.5]", "targets[0] must be a finite number in (0, 1]"),
    ("model=cnn dataset=synthetic partition=natural num_clients=30", "does not fit"),
])
def test_bad_input_exits_2_with_one_message_and_no_run(tmp_path, override, needle):
    db = tmp_path / "m.db"
    out = fedbench("run", *override.split(), f"tracking.uri=sqlite:///{db}", f"data.root={tmp_path}/nodata",
                   f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    if db.exists():
        assert _runs(db)[1] == []


def test_list_version_help(tmp_path):
    out = fedbench("list", cwd=tmp_path)
    assert out.returncode == 0
    for name in ("fedavg", "fedsgd", "digits", "fmnist", "dirichlet", "shards", "mlp_2nn", "cnn"):
        assert f"  {name} " in out.stdout
    assert fedbench("--version", cwd=tmp_path).stdout.startswith("fedbench ")
    for cmd in ("run", "list"):
        assert fedbench(cmd, "--help", cwd=tmp_path).returncode == 0


def test_print_config(tmp_path):
    out = fedbench("run", "--cfg", "job", "dataset=fmnist", cwd=tmp_path)
    assert out.returncode == 0 and "name: fmnist" in out.stdout


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_multirun_runs_every_job(tmp_path):
    db = tmp_path / "m.db"
    out = fedbench("run", "-m", "rounds=2", "algorithm=fedavg,fedsgd", f"tracking.uri=sqlite:///{db}",
                   f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    names = sorted(r.data.params["algorithm.name"] for r in _runs(db)[1])
    assert names == ["fedavg", "fedsgd"]


def test_list_wraps_long_descriptions_to_the_terminal_instead_of_cutting_them(monkeypatch):
    """Issue 33: descriptions were cut at 100 characters with no ellipsis."""
    from typer.testing import CliRunner

    from fedbench.cli.app import app
    from fedbench.cli.listing import config_options, selected_name

    monkeypatch.setenv("COLUMNS", "80")
    text = CliRunner().invoke(app, ["list"]).stdout
    variants = [o for o in config_options("algorithm") if "/" in o]  # fedavg/adam: shown by its file's comment
    longest = max((selected_name("algorithm", o)[1] for o in variants), key=len)
    assert len(longest) > 100
    assert longest in " ".join(text.split())  # every word, in order
    assert max(map(len, text.splitlines())) <= 80
