"""Sweeps: a joblib grid in one MLflow experiment with its overrides as tags, a re-launch that
skips finished jobs, an interrupted job continued from its checkpoint, a failed job that does not
stop the grid, concurrent writers on the local SQLite store, and `fedbench report` tables."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

import pytest
import torch

from fedbench.core.errors import FedbenchError
from tests.conftest import make_cfg, run_history
from tests.faultkit import SMALL, env, error_lines, fedbench, runs

GRID = ["algorithm=fedavg,fedsgd", "eta_l=0.05,0.2", "seed=0,1"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 2 x 2 x 2 grid on the joblib launcher, launched twice (the second time skips every job)."""
    tmp = tmp_path_factory.mktemp("sweep")
    db = tmp / "m.db"
    args = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *GRID, *SMALL, "rounds=3", "targets=[0.2]",
            f"tracking.uri=sqlite:///{db}"]
    first = fedbench("run", *args, f"hydra.sweep.dir={tmp}/a", cwd=tmp, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    again = fedbench("run", *args, f"hydra.sweep.dir={tmp}/b", cwd=tmp, timeout=900)
    return db, tmp, first, again


@pytest.mark.slow
def test_joblib_grid_is_one_experiment_tagged_and_relaunch_skips(sweep):
    db, tmp, _, again = sweep
    client, all_runs = runs(db)
    assert len(all_runs) == 8 and {r.info.status for r in all_runs} == {"FINISHED"}
    assert {r.info.experiment_id for r in all_runs} == {all_runs[0].info.experiment_id}
    assert {r.data.tags["sweep_dir"] for r in all_runs} == {str(tmp / "a")}
    grid = {(r.data.params["algorithm.name"], r.data.params["eta_l"], r.data.params["seed"]) for r in all_runs}
    assert len(grid) == 8
    for r in all_runs:
        assert f"algorithm={r.data.params['algorithm.name']} eta_l={r.data.params['eta_l']}" in r.data.tags["overrides"]
        assert [m.step for m in client.get_metric_history(r.info.run_id, "test_accuracy")] == [1, 2, 3]
    assert again.returncode == 0 and again.stderr.count("skipped, this configuration FINISHED") == 8


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_report_tables_from_the_sweep(sweep):
    from fedbench.core.errors import ConfigError
    from fedbench.tracking.report import build_table, load_runs

    db = sweep[0]
    frame = load_runs(f"sqlite:///{db}", "fedbench")
    with pytest.raises(ConfigError, match="would pool runs that differ in eta_l"):  # two step sizes are not seeds
        build_table(frame, ["dataset.name"], 0.2, "fedavg", None)
    table = build_table(frame, None, 0.2, "fedavg", None)  # the setting: the keys that vary (eta_l)
    assert list(table["seeds"]) == [2, 2, 2, 2]
    for _, row in table.iterrows():
        eta = row["setting"].removeprefix("eta_l=")
        runs_ = frame[(frame["param:algorithm.name"] == row["algorithm"]) & (frame["param:eta_l"].astype(float) == float(eta))]
        accs = runs_["final_accuracy"]
        assert len(accs) == 2 and row["final_accuracy"] == f"{accs.mean():.4f} ± {accs.std(ddof=1):.4f}"  # sample std
    best = build_table(frame, ["dataset.name"], 0.2, "fedavg", "final_accuracy").set_index("algorithm")
    for alg in ("fedavg", "fedsgd"):
        sub = frame[frame["param:algorithm.name"] == alg]
        means = sub.groupby("param:eta_l")["final_accuracy"].mean()
        assert best.loc[alg, "seeds"] == 2 and best.loc[alg, "best config"] == f"eta_l={means.idxmax()}"
    out = fedbench("report", "--uri", f"sqlite:///{db}", "--target", "0.2", "--format", "csv", cwd=sweep[1])
    assert out.returncode == 0 and out.stdout.splitlines()[0].startswith("algorithm,setting,n,final_accuracy_mean,final_accuracy_std")


def test_interrupted_sweep_job_continues_from_its_checkpoint(tmp_path, monkeypatch):
    """A re-launched sweep finds the interrupted job through its run_dir tag and continues it."""
    from fedbench.runs.single import run_job

    overrides = [*SMALL, "rounds=6", "tracking.checkpoint_every=2", f"tracking.uri=sqlite:///{tmp_path}/m.db"]
    real_save = torch.save

    def crash_at_round_4(obj, f, *a, **k):
        if obj["round"] == 4:
            raise OSError(errno.EIO, "simulated crash")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", crash_at_round_4)
    with pytest.raises(FedbenchError):
        run_job(make_cfg(*overrides), tmp_path / "old", quiet=True, sweep=True)
    monkeypatch.setattr(torch, "save", real_save)
    summary = run_job(make_cfg(*overrides), tmp_path / "new", quiet=True, sweep=True)
    client, [run] = runs(tmp_path / "m.db")
    assert run.info.status == "FINISHED" and summary["run_id"] == run.info.run_id
    assert torch.load(tmp_path / "old" / "checkpoint.pt", weights_only=True)["round"] == 6
    logged = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "test_accuracy"))
    assert logged == [(h["round"], h["test_accuracy"]) for h in run_history(*overrides)]


@pytest.mark.slow
def test_a_diverging_job_fails_alone_and_the_grid_exits_nonzero(tmp_path):
    db = tmp_path / "m.db"
    out = fedbench("run", "-m", "eta_l=0.01,10", *SMALL, "dataset=lstsq", "partition=natural", "model=linear",
                   "num_clients=8", "rounds=30", f"tracking.uri=sqlite:///{db}", f"hydra.sweep.dir={tmp_path}/s",
                   cwd=tmp_path)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "1 job(s) failed" in out.stderr and "eta_l=10" in out.stderr.split("1 job(s) failed")[1]
    assert any("run diverged at round" in line for line in error_lines(out.stderr))
    status = {r.data.params["eta_l"]: r for r in runs(db)[1]}
    assert status["0.01"].info.status == "FINISHED" and status["10"].info.status == "FAILED"
    assert status["10"].data.tags["failure_reason"].startswith("non-finite")


WRITER = textwrap.dedent("""
    import sys
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient
    from fedbench.tracking.store import ensure_experiment
    uri, k = sys.argv[1], int(sys.argv[2])
    client = MlflowClient(uri)
    run = client.create_run(ensure_experiment(client, "concurrent", uri), tags={"writer": str(k)})
    for r in range(1, 41):
        client.log_batch(run.info.run_id, metrics=[Metric(m, r * k, 0, r) for m in ("a", "b", "c")])
    client.set_terminated(run.info.run_id)
""")


@pytest.mark.slow
def test_eight_concurrent_writers_lose_nothing_on_sqlite(tmp_path):
    """As in a sweep: the launching process creates the store (fedbench.runs.callbacks.SweepCallback; eight
    processes creating a fresh SQLite store at once race on MLflow's schema migrations)."""
    from mlflow.tracking import MlflowClient

    from fedbench.tracking.store import ensure_experiment

    uri = f"sqlite:///{tmp_path}/m.db"
    ensure_experiment(MlflowClient(uri), "concurrent", uri)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, uri, str(k)], env=env(), stderr=subprocess.PIPE, text=True)
             for k in range(1, 9)]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()[-2000:]
    client = MlflowClient(uri)
    found = client.search_runs([client.get_experiment_by_name("concurrent").experiment_id])
    assert sorted(int(r.data.tags["writer"]) for r in found) == list(range(1, 9))
    for r in found:
        k = int(r.data.tags["writer"])
        assert r.info.status == "FINISHED"
        for m in ("a", "b", "c"):
            assert sorted((x.step, x.value) for x in client.get_metric_history(r.info.run_id, m)) == \
                [(s, float(s * k)) for s in range(1, 41)]


def test_report_setting_with_a_param_some_algorithms_lack():
    """A setting key that only some algorithms have (LoSAC's algorithm.blocks) shows '-' elsewhere."""
    import pandas as pd

    from fedbench.tracking.report import build_table

    frame = pd.DataFrame({
        "param:algorithm.name": ["losac", "losac", "scaffold"], "param:algorithm.blocks": ["2", "5", None],
        "param:rounds": ["10", "10", "10"], "param:seed": ["0", "0", "0"],
        "final_accuracy": [0.5, 0.6, 0.7], "best_accuracy": [0.5, 0.6, 0.7], "final_loss": [1.0, 0.9, 0.8],
    })
    table = build_table(frame, ["algorithm.blocks"], None, None, None)
    assert sorted(zip(table["algorithm"], table["setting"])) == [
        ("losac", "algorithm.blocks=2"), ("losac", "algorithm.blocks=5"), ("scaffold", "algorithm.blocks=-")]


def _frame(rows):
    import pandas as pd

    base = {"param:rounds": "10", "final_loss": 1.0}
    frame = pd.DataFrame([{**base, **r} for r in rows])
    frame["final_accuracy"] = frame["history"].map(lambda h: h[-1][1])
    frame["best_accuracy"] = frame["history"].map(lambda h: max(a for _, a in h))
    return frame


def test_report_rounds_to_any_target_from_the_history_with_seeds_reached_and_sample_std():
    from fedbench.tracking.report import build_table

    up = [(r, r / 10) for r in range(1, 11)]  # reaches t at round 10 t
    slow = [(r, r / 20) for r in range(1, 11)]  # never above 0.5
    frame = _frame([
        {"param:algorithm.name": "a", "param:seed": "0", "history": up},
        {"param:algorithm.name": "a", "param:seed": "1", "history": [(r, min(1, a + 0.1)) for r, a in up]},
        {"param:algorithm.name": "b", "param:seed": "0", "history": up},
        {"param:algorithm.name": "b", "param:seed": "1", "history": slow},
        {"param:algorithm.name": "c", "param:seed": "0", "history": slow},
    ])
    table = build_table(frame, None, 0.7, "a", None, last=3).set_index("algorithm")
    assert table.loc["a", "rounds_to_0.7"] == "6.5 ± 0.7"  # rounds 7 and 6: sample std 0.707
    assert table.loc["b", "rounds_to_0.7"] == "7.0 (1/2 reached)"
    assert table.loc["c", "rounds_to_0.7"] == ">10 (0/1)"
    assert table.loc["c", "final_accuracy"] == "0.5000"  # one seed: no "± 0"
    assert table.loc["a", "speed-up vs a"] == "1.00x" and table.loc["b", "speed-up vs a"] == ""
    assert table.loc["c", "last_3_accuracy"] == "0.4500"


def test_report_groups_by_every_key_that_differs_and_best_by_tunes_the_step_size():
    from fedbench.tracking.report import build_table

    h = [(1, 0.5), (2, 0.6)]
    rows = [{"param:algorithm.name": "a", "param:seed": str(s), "param:eta_l": lr, "param:partition.alpha": al,
             "history": [(1, 0.5), (2, 0.6 + float(lr) + s / 100)]}
            for s in (0, 1) for lr in ("0.1", "0.01") for al in ("0.1", "1.0")]
    frame = _frame(rows)
    table = build_table(frame, None, None, None, None)
    assert sorted(table["setting"]) == sorted(f"eta_l={lr} partition.alpha={al}" for lr in ("0.1", "0.01") for al in ("0.1", "1.0"))
    assert (table["seeds"] == 2).all()
    best = build_table(frame, None, None, None, "final_accuracy")
    assert sorted(best["setting"]) == ["partition.alpha=0.1", "partition.alpha=1.0"]
    assert set(best["best config"]) == {"eta_l=0.1"}
    assert h
