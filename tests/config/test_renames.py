"""Renamed config choices (config/renames.py): `fedbench run` refuses an old name with one line naming
the new one; `fedbench resume` of a run folder recorded under the old name continues it."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import build
from tests.faultkit import error_lines, fedbench, record_as
from tests.problems import STOCHASTIC
from fedbench.config.compose import compose, conf_dir
from fedbench.config.preflight import checked_compose
from fedbench.config.preflight import preflight
from fedbench.config.renames import RENAMED, map_overrides
from fedbench.core.errors import ConfigError
from fedbench.engine.loop import run
from fedbench.runs.single import CHECKPOINT_NAME


def test_an_old_name_is_refused_with_the_new_one(tmp_path):
    out = fedbench("run", "-m", "algorithm=fedavg,fedadam", "rounds=1", cwd=tmp_path)
    assert out.returncode == 2
    assert error_lines(out.stderr) == [
        "error: algorithm=fedadam was renamed: use algorithm=fedavg/adam "
        "(its hyperparameters are now algorithm.server_opt.<key>)"]


@pytest.mark.parametrize(("group", "old"), [(g, o) for g, names in RENAMED.items() for o in names])
def test_every_old_name_of_every_group_is_refused_naming_the_new_one(group, old):
    new = RENAMED[group][old]
    with pytest.raises(ConfigError) as refused:
        preflight(conf_dir(), [f"{group}={old}"])
    assert str(refused.value).startswith(f"{group}={old} was renamed: use {group}={new}")
    with pytest.raises(ConfigError, match=f"{group}={old} was renamed"):  # in a sweep's later job too
        preflight(conf_dir(), ["-m", f"{group}={new},{old}"])


@pytest.mark.parametrize(("override", "line"), [
    ("dataset=fmnist_fedadmm", "error: dataset=fmnist_fedadmm was renamed: use dataset=fedadmm/fmnist"),
    ("model=cnn1_fedadmm", "error: model=cnn1_fedadmm was renamed: use model=fedadmm/cnn1"),
])
def test_a_renamed_dataset_or_model_is_refused_in_preflight_with_one_line(tmp_path, override, line):
    out = fedbench("run", override, "rounds=1", cwd=tmp_path)
    assert out.returncode == 2 and error_lines(out.stderr) == [line], out.stderr[-2000:]
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlruns").exists()  # refused before any work


def test_a_config_dir_of_ones_own_may_use_an_old_name(tmp_path):
    """`--config-dir` with a dataset/mnist_pfl.yaml of its own: that file is a choice, not a renamed one."""
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "mnist_pfl.yaml").write_text("name: digits\n")
    preflight(conf_dir(), ["--config-dir", str(tmp_path), "dataset=mnist_pfl"])


def test_overrides_map_the_name_and_the_keys_that_moved_with_it():
    assert map_overrides(["algorithm=fedyogi", "algorithm.tau=0.01", "+algorithm.v0=0.1", "rounds=3"]) == [
        "algorithm=fedavg/yogi", "algorithm.server_opt.tau=0.01", "+algorithm.server_opt.v0=0.1", "rounds=3"]
    assert map_overrides(["algorithm=fedsso_ref_v1", "algorithm.s_scale=1"]) == [
        "algorithm=fedsso/ref_v1", "algorithm.s_scale=1"]
    assert map_overrides(["algorithm=fedavg", "algorithm.server_opt.tau=1"]) == ["algorithm=fedavg", "algorithm.server_opt.tau=1"]
    assert map_overrides(["dataset=mnist_pfl", "dataset.num_users=3", "model=lenet", "+model=cnn_fedsso", "seed=1"]) == [
        "dataset=fedsso/mnist", "dataset.num_users=3", "model=fedsso/lenet", "+model=fedsso/cnn", "seed=1"]
    assert map_overrides(["experiment=losac/fig4", "dataset=mnist", "model.name=lenet"]) == [
        "experiment=losac/fig4", "dataset=mnist", "model.name=lenet"]  # current names and registered names stay


@pytest.mark.parametrize(("group", "old"), [(g, o) for g, names in RENAMED.items() for o in names
                                            if g != "algorithm" or o in ("scaffold_prox", "losac_paper")])
def test_a_moved_file_selects_what_the_old_name_did(group, old):
    """The files moved without changing what they select: a file's own keys, over the generic file it
    extends (`defaults: [/<group>/<base>@_here_]`), with the registered name the old file had."""
    import yaml

    new = RENAMED[group][old]
    raw = yaml.safe_load((conf_dir() / group / f"{new}.yaml").read_text())
    bases = [d.split("@")[0].removeprefix(f"/{group}/") for d in raw.pop("defaults", []) if d != "_self_"]
    assert all("/" not in b for b in bases)  # a moved file extends a generic one, not another paper's
    expected = {}
    for base in bases:
        expected.update(OmegaConf.to_container(compose([f"{group}={base}"])[group]))
    expected.update(raw)
    assert OmegaConf.to_container(compose([f"{group}={new}"])[group]) == expected
    registered = {"scaffold_prox": "scaffold", "losac_paper": "losac", "fmnist_fedadmm": "fmnist", "mnist_raw": "mnist",
                  "mnist_binary": "mnist", "har_binary": "har"}.get(old, "pfl" if old.endswith("_pfl") else old)
    assert expected["name"] == registered


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
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
    def as_fedadam(recorded):
        hyper = OmegaConf.to_container(recorded.algorithm.server_opt)
        recorded.algorithm = {"name": "fedadam", **{k: v for k, v in hyper.items() if k != "name"}}

    record_as(run_dir, [*old, "rounds=4", "tracking.checkpoint_every=1", f"tracking.uri={db}",
                        f"hydra.run.dir={run_dir}"], 4, as_fedadam)

    out = fedbench("resume", str(run_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "algorithm=fedadam -> algorithm=fedavg/adam" in out.stderr and "from round 2" in out.stderr + out.stdout
    resumed = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    assert resumed["round"] == 4
    assert torch.equal(resumed["server"]["x"], run(build(*new, "rounds=4")).server["x"])


# -- keys that moved: the algorithms' own local-step extras became the shared top-level ones ------------

# config_hash of these command lines as version d8cd4c0 (before the extras were shared) computed them
HASHES_BEFORE_SHARED_EXTRAS = {
    (): "c24b99d0318c493a",
    ("algorithm=fedspeed",): "a3b5d816a4dce279",
    ("algorithm=fedspeed_ing",): "2b5c52c6afa06fda",
    ("algorithm=fedadmm",): "cc104a13818a0c7e",
    ("algorithm=scaffold",): "0a63adee9ab65aad",
    ("experiment=fedspeed/proxy_synth",): "abce770436c16a2e",
}


@pytest.mark.parametrize("overrides", sorted(HASHES_BEFORE_SHARED_EXTRAS))
def test_runs_of_earlier_versions_keep_their_config_hash(overrides):
    from fedbench.runs.single import config_hash

    assert config_hash(compose(list(overrides))) == HASHES_BEFORE_SHARED_EXTRAS[overrides]


# config_hash as commit ca3db5d (before FedADMM's chained and FedProx's hetero_epochs, issue 36) computed them.
# Since issue 40 `experiment=fedadmm/table3 algorithm=fedprox` composes the reproduction's FedProx arm
# (conf/arm/fedadmm/table3/fedprox.yaml: hetero_epochs on), a different run: the switch is then set off by hand.
HASHES_BEFORE_ISSUE_36 = {
    ("algorithm=fedprox",): "c43772e4e2bc26ef",
    ("algorithm=fedadmm",): "cc104a13818a0c7e",
    ("experiment=fedadmm/table3", "algorithm=fedprox", "algorithm.mu=0.1", "algorithm.hetero_epochs=false"):
        "8c7736d6e51e643b",
}


def test_a_later_switch_off_keeps_the_hash_and_on_changes_it():
    from fedbench.runs.single import config_hash

    for overrides, expected in HASHES_BEFORE_ISSUE_36.items():
        assert config_hash(compose(list(overrides))) == expected, overrides
    for overrides, switch in ((["algorithm=fedprox"], "algorithm.hetero_epochs=true"),
                              (["algorithm=fedadmm"], "algorithm.chained=true")):
        assert config_hash(compose([*overrides, switch])) != config_hash(compose(overrides))
    # the preset's arm is the run with the switch on: its own hash, not the hash of the earlier fixed-epoch run
    arm = ["experiment=fedadmm/table3", "algorithm=fedprox", "algorithm.mu=0.1"]
    assert config_hash(compose(arm)) == config_hash(compose([*arm, "algorithm.hetero_epochs=true"])) != "8c7736d6e51e643b"


def test_an_extra_changes_the_hash_where_it_changes_the_run():
    from fedbench.runs.single import config_hash

    for overrides, changed in ((["algorithm=fedavg"], "weight_decay=0.001"), (["algorithm=fedspeed"], "weight_decay=0"),
                               (["algorithm=fedadmm"], "local_momentum=0"), (["algorithm=fedspeed"], "local_momentum=0.5")):
        assert config_hash(compose([*overrides, changed])) != config_hash(compose(overrides)), (overrides, changed)


@pytest.mark.parametrize(("old", "new"), [("algorithm.weight_decay", "weight_decay"), ("algorithm.grad_clip", "grad_clip"),
                                          ("algorithm.momentum", "local_momentum")])
def test_a_moved_key_is_refused_naming_its_new_place_and_resume_maps_it(old, new):
    algorithm = "fedadmm" if new == "local_momentum" else "fedspeed"
    with pytest.raises(ConfigError, match=f"^{old} moved to the top level: use {new}=0.25 "):
        checked_compose([f"algorithm={algorithm}", f"{old}=0.25"])
    assert map_overrides([f"algorithm={algorithm}", f"{old}=0.25"]) == [f"algorithm={algorithm}", f"{new}=0.25"]
