"""Renamed config choices (config/renames.py): `fedbench run` refuses an old name with one line naming
the new one; `fedbench resume` of a run folder recorded under the old name continues it."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from tests.conftest import build
from tests.faultkit import error_lines, fedbench
from tests.problems import STOCHASTIC
from fedbench.config.renames import map_overrides
from fedbench.engine.loop import run
from fedbench.runs.single import CHECKPOINT_NAME, config_hash


def test_an_old_name_is_refused_with_the_new_one(tmp_path):
    out = fedbench("run", "-m", "algorithm=fedavg,fedadam", "rounds=1", cwd=tmp_path)
    assert out.returncode == 2
    assert error_lines(out.stderr) == [
        "error: algorithm=fedadam was renamed: use algorithm=fedavg/adam "
        "(its hyperparameters are now algorithm.server_opt.<key>)"]


def test_overrides_map_the_name_and_the_keys_that_moved_with_it():
    assert map_overrides(["algorithm=fedyogi", "algorithm.tau=0.01", "+algorithm.v0=0.1", "rounds=3"]) == [
        "algorithm=fedavg/yogi", "algorithm.server_opt.tau=0.01", "+algorithm.server_opt.v0=0.1", "rounds=3"]
    assert map_overrides(["algorithm=fedsso_ref_v1", "algorithm.s_scale=1"]) == [
        "algorithm=fedsso/ref_v1", "algorithm.s_scale=1"]
    assert map_overrides(["algorithm=fedavg", "algorithm.server_opt.tau=1"]) == ["algorithm=fedavg", "algorithm.server_opt.tau=1"]


def test_resume_of_a_run_recorded_as_fedadam_continues_as_fedavg_adam(tmp_path):
    """A 2-round fedavg/adam run, its folder rewritten as the old FedAdam class recorded it (name,
    flat hyperparameters, 4 rounds): resume maps the names and trains rounds 3-4 from the checkpoint,
    ending where an uninterrupted 4-round fedavg/adam run ends."""
    run_dir = tmp_path / "run"
    new = [*STOCHASTIC, "algorithm=fedavg/adam", "algorithm.server_opt.tau=0.01", "eta_g=0.05"]
    db = f"sqlite:///{tmp_path}/m.db"
    out = fedbench("run", *new, "rounds=2", "tracking.checkpoint_every=1", f"tracking.uri={db}",
                   f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    old = [o.replace("algorithm=fedavg/adam", "algorithm=fedadam").replace("server_opt.", "") for o in new]
    hydra = run_dir / ".hydra"
    OmegaConf.save(OmegaConf.create([*old, "rounds=4", "tracking.checkpoint_every=1", f"tracking.uri={db}",
                                     f"hydra.run.dir={run_dir}"]), hydra / "overrides.yaml")
    recorded = OmegaConf.load(hydra / "config.yaml")
    recorded.rounds = 4
    hyper = OmegaConf.to_container(recorded.algorithm.server_opt)
    recorded.algorithm = {"name": "fedadam", **{k: v for k, v in hyper.items() if k != "name"}}
    OmegaConf.save(recorded, hydra / "config.yaml")
    payload = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    payload["config_hash"] = config_hash(recorded)
    torch.save(payload, run_dir / CHECKPOINT_NAME)

    out = fedbench("resume", str(run_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "algorithm=fedadam -> algorithm=fedavg/adam" in out.stderr and "from round 2" in out.stderr + out.stdout
    resumed = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    assert resumed["round"] == 4
    assert torch.equal(resumed["server"]["x"], run(build(*new, "rounds=4")).server["x"])
