"""Runs whose checkpoints cannot fit on their disk are refused before they train (runs.checkpoint_space): the
fedadmm/table3 fmnist grid filled a 64 GB disk with its lanes' client tables and lost four finished lanes."""

from __future__ import annotations

import pytest

import fedbench.runs.checkpoint_space as space
from fedbench.core.errors import ConfigError
from tests.conftest import make_cfg
from tests.faultkit import SMALL, runs


def built(*overrides: str):
    from fedbench.engine.loop import initial_state
    from fedbench.runs.build import build_federation

    cfg = make_cfg(*SMALL, *overrides)
    fed, _ = build_federation(cfg)
    return cfg, fed, initial_state(fed)


def test_checkpoint_bytes_is_a_row_per_client_the_run_can_visit():
    cfg, fed, state = built("algorithm=scaffold", "rounds=3")  # 4 clients, 2 a round: all 4 can be visited
    d = fed.flat.dim
    assert space.checkpoint_bytes(cfg, fed, state) == 4 * d * 4  # c_i: a float32 row of d per client
    cfg, fed, state = built("algorithm=scaffold", "rounds=1")  # one round visits 2
    assert space.checkpoint_bytes(cfg, fed, state) == 2 * d * 4
    cfg, fed, state = built("algorithm=fedadmm", "algorithm.local_init=local", "algorithm.hetero_epochs=false", "rounds=3",
                           "engine.dtype=float64")
    assert space.checkpoint_bytes(cfg, fed, state) == 4 * 2 * d * 8  # y_i and w_i, float64
    assert space.checkpoint_bytes(*built("algorithm=fedavg", "rounds=3")) == 0  # no client tables
    assert space.checkpoint_bytes(*built("algorithm=scaffold", "rounds=3", "tracking.checkpoint_every=0")) == 0


def run_job_in(tmp_path, *overrides: str):
    from fedbench.runs.single import run_job

    return run_job(make_cfg(*SMALL, f"tracking.uri=sqlite:///{tmp_path}/m.db", *overrides), tmp_path / "run", quiet=True)


def test_a_run_whose_checkpoint_cannot_fit_is_refused_before_its_first_round(tmp_path, monkeypatch):
    monkeypatch.setattr(space, "free_bytes", lambda folder: 1000)
    with pytest.raises(ConfigError) as info:
        run_job_in(tmp_path, "algorithm=scaffold", "rounds=3")
    message = str(info.value)
    assert message.startswith("the checkpoints of 1 run(s) can take up to ") and "and the disk of " in message, message
    assert "has 1.0 kB free: free some space, or set tracking.checkpoint_every=0" in message and "\n" not in message
    assert not (tmp_path / "run" / "checkpoint.pt").exists()
    client, [run] = runs(tmp_path / "m.db")
    assert run.info.status == "FAILED" and client.get_metric_history(run.info.run_id, "test_accuracy") == []
    summary = run_job_in(tmp_path, "algorithm=scaffold", "rounds=3", "seed=1", "tracking.checkpoint_every=0")
    assert summary["rounds"] == 3  # no checkpoints: nothing to fit


def test_a_grid_s_lanes_are_counted_together(tmp_path, monkeypatch):
    """Every lane keeps its own checkpoint: two lanes need twice one's space, and both are refused where only one
    would fit; the store records each FAILED with the reason, and neither trains."""
    from fedbench.config.preflight import checked_compose
    from fedbench.runs.api import run_batched

    one = space.checkpoint_bytes(*built("algorithm=scaffold", "rounds=3"))
    monkeypatch.setattr(space, "free_bytes", lambda folder: int(1.5 * one))
    jobs = []
    for lr in ("0.05", "0.1"):
        overrides = [*SMALL, "algorithm=scaffold", "rounds=3", f"eta_l={lr}", f"tracking.uri=sqlite:///{tmp_path}/m.db"]
        jobs.append((checked_compose(overrides), overrides, tmp_path / lr, f"lr {lr}"))
    results = run_batched(jobs)
    assert all(isinstance(r, ConfigError) and str(r).startswith("the checkpoints of 2 run(s) can take up to ")
               for r in results), results
    client, found = runs(tmp_path / "m.db")
    assert sorted(r.info.status for r in found) == ["FAILED", "FAILED"]
    assert all(client.get_metric_history(r.info.run_id, "test_accuracy") == [] for r in found)
    assert "checkpoints of 2 run(s)" in found[0].data.tags["failure_reason"]
    monkeypatch.setattr(space, "free_bytes", lambda folder: int(2.5 * one))
    jobs = [(checked_compose([*o, "seed=1"]), [*o, "seed=1"], tmp_path / f"{d.name}-fits", label) for _, o, d, label in jobs]
    assert all(r.summary["rounds"] == 3 for r in run_batched(jobs))
