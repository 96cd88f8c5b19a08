"""`fedbench resume` of a run folder recorded under the old names of a data set, a model and an
algorithm variant (config/renames.py): the recorded overrides are mapped and the run continues."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import build
from tests.faultkit import SMALL, fedbench, record_as
from fedbench.engine.loop import run
from fedbench.runs.single import CHECKPOINT_NAME

# FedSpeed's synthetic proxy data, FedADMM's FC model (8 hidden units), SCAFFOLD-Prox: offline and small
NEW = [*SMALL, "dataset=fedspeed/proxy_synth", "dataset.n_samples=300", "dataset.n_test=100", "model=fedadmm/fc",
       "model.hidden=8", "algorithm=scaffold/prox", "eta_l=0.05"]
OLD_NAMES = {"dataset=fedspeed/proxy_synth": "dataset=proxy_synth", "model=fedadmm/fc": "model=fc_fedadmm",
             "algorithm=scaffold/prox": "algorithm=scaffold_prox"}


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_resume_maps_a_recorded_dataset_model_and_variant_and_continues(tmp_path):
    """A 2-round run, its folder rewritten as the old layout recorded a 4-round run (overrides by the
    old names; the composed config is the same): resume names the mapping, rewrites overrides.yaml,
    and trains rounds 3-4, ending where an uninterrupted 4-round run ends."""
    run_dir = tmp_path / "run"
    db = f"sqlite:///{tmp_path}/m.db"
    placement = ["tracking.checkpoint_every=1", f"tracking.uri={db}", f"hydra.run.dir={run_dir}"]
    out = fedbench("run", *NEW, "rounds=2", *placement, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    hydra = run_dir / ".hydra"
    old = [OLD_NAMES.get(o, o) for o in NEW]
    record_as(run_dir, [*old, "rounds=4", *placement], 4)

    out = fedbench("resume", str(run_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    named = next(line for line in out.stderr.splitlines() if line.startswith("renamed since this run was recorded: "))
    assert all(f"{was} -> {now}" in named for now, was in OLD_NAMES.items()), named
    assert "from round 2" in out.stderr + out.stdout
    assert set(OLD_NAMES) <= set(OmegaConf.load(hydra / "overrides.yaml"))  # the folder now records the new names
    resumed = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    assert resumed["round"] == 4
    straight = run(build(*NEW, "rounds=4")).server
    assert resumed["server"].keys() == straight.keys()
    for key in straight:
        assert torch.equal(resumed["server"][key], straight[key]), key
