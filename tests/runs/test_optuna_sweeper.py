"""Hyperparameter search with Hydra's Optuna sweeper: every trial is an MLflow run, the sweeper
sees each job's objective (tracking.objective), and its best trial is the best run in the store."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import require_module
from tests.faultkit import SMALL, fedbench, runs

require_module("hydra_plugins.hydra_optuna_sweeper", "the Optuna sweeper is the `tune` extra")


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "direction"), [("final_accuracy", "maximize"), ("final_loss", "minimize")])
def test_optuna_search_over_a_log_uniform_learning_rate(tmp_path, objective, direction):
    db = tmp_path / "m.db"
    out = fedbench(
        "run", "-m", "hydra/sweeper=optuna", f"hydra.sweeper.direction={direction}", "hydra.sweeper.n_trials=6",
        "hydra.sweeper.n_jobs=1", "hydra.sweeper.sampler.seed=0", "eta_l=tag(log,interval(0.001,1))",
        *SMALL, "rounds=3", f"tracking.objective={objective}", "tracking.experiment=tune",
        f"tracking.uri=sqlite:///{db}", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    client, trials = runs(db)
    assert len(trials) == 6 and {r.info.status for r in trials} == {"FINISHED"}
    etas = [float(r.data.params["eta_l"]) for r in trials]
    assert all(0.001 <= e <= 1 for e in etas) and len(set(etas)) == 6  # drawn, not a grid
    metric = {"final_accuracy": "test_accuracy", "final_loss": "test_loss"}[objective]
    values = {float(r.data.params["eta_l"]): client.get_metric_history(r.info.run_id, metric)[-1].value for r in trials}
    pick = max if direction == "maximize" else min
    best_eta = pick(values, key=values.get)
    result = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert result["best_value"] == pytest.approx(values[best_eta], abs=1e-6)
    assert float(result["best_params"]["eta_l"]) == pytest.approx(best_eta, rel=1e-9)
