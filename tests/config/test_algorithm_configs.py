"""Algorithm configs: every file names a registered algorithm, and every algorithm runs as typed (the
run settings its method needs come with its config, issue 24). The yaml defaults = the dataclass
defaults: tests/algorithms/test_contract.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import CONF, make_cfg
from fedbench.algorithms import load_all
from fedbench.algorithms import server_opt
from fedbench.config.renames import RENAMED
from fedbench.config.validate import params_of

ALGORITHM_FILES = sorted(str(p.relative_to(Path(CONF) / "algorithm").with_suffix(""))
                         for p in (Path(CONF) / "algorithm").rglob("*.yaml"))
REGISTERED = load_all().names()


@pytest.mark.parametrize("variant", ["avgm", "adagrad", "adam", "yogi"])
def test_fedavg_variants_write_out_their_server_optimisers_defaults(variant):
    """fedavg/<variant> is fedavg.yaml with the server optimiser's paper defaults (server_opt.py)."""
    yaml = params_of(make_cfg(f"algorithm=fedavg/{variant}").algorithm)
    name = {"avgm": "momentum"}.get(variant, variant)
    assert yaml == {**params_of(make_cfg("algorithm=fedavg").algorithm), "server_opt": server_opt.full_mapping(name)}


def test_renamed_choices_point_at_existing_files():
    for group, names in RENAMED.items():
        for old, new in names.items():
            assert (Path(CONF) / group / f"{new}.yaml").is_file() and not (Path(CONF) / group / f"{old}.yaml").exists()


def test_every_file_of_the_algorithm_group_is_registered_or_a_variant():
    for stem in ALGORITHM_FILES:
        assert make_cfg(f"algorithm={stem}").algorithm.name in REGISTERED


@pytest.mark.parametrize("stem", ALGORITHM_FILES)
def test_imposed_settings_are_listed_and_set(stem):
    """`algorithm.imposes` names exactly the run settings the file sets outside `algorithm`."""
    raw = OmegaConf.to_container(OmegaConf.load(Path(CONF) / "algorithm" / f"{stem}.yaml"), resolve=False)
    is_global = (Path(CONF) / "algorithm" / f"{stem}.yaml").read_text().startswith("# @package _global_")
    if not is_global:
        assert "imposes" not in raw
        return
    top = {k for k in raw if k not in ("algorithm", "defaults")}
    groups = {k.removeprefix("override ").lstrip("/") for e in raw.get("defaults", []) if isinstance(e, dict) for k in e}
    assert set(raw["algorithm"]["imposes"]) == top | groups


def test_imposed_settings_are_visible_in_the_composed_config_and_a_command_line_value_wins():
    cfg = make_cfg("algorithm=fedcomp")
    assert cfg.clients_per_round == cfg.num_clients == 20
    assert cfg.local_steps == 5 and cfg.local_epochs is None
    assert list(cfg.algorithm.imposes) == ["clients_per_round", "local_epochs", "local_steps"]
    assert make_cfg("algorithm=fedcomp", "num_clients=12").clients_per_round == 12  # follows num_clients
    assert make_cfg("algorithm=fedcomp", "clients_per_round=4").clients_per_round == 4
    assert make_cfg("algorithm=fedavg").clients_per_round == 10  # the others keep config.yaml's defaults
    lowrank = make_cfg("algorithm=fedadmm_lowrank")
    assert (lowrank.dataset.name, lowrank.model.name, lowrank.partition.name) == ("lowrank", "matrix", "natural")
    assert make_cfg("algorithm=fedadmm_lowrank", "model=mclr").model.name == "mclr"
    # an experiment preset comes after the algorithm's settings
    assert make_cfg("experiment=composite/fig4").clients_per_round == 10


def _fedbench(*args, cwd):
    # into a pipe `fedbench list` writes whole lines unless COLUMNS is set; GNU readline, once any import in
    # this process initialises it, exports COLUMNS into the C environment children inherit: drop it
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "fedbench.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def test_list_and_cfg_job_show_the_imposed_settings(tmp_path):
    out = _fedbench("list", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    fedcomp = next(i for i, line in enumerate(lines) if line.strip().startswith("fedcomp "))
    assert lines[fedcomp + 1].split() == ["imposes:", "clients_per_round=${num_clients},", "local_epochs=null,",
                                          "local_steps=5"]
    job = _fedbench("run", "--cfg", "job", "algorithm=fednl", cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    assert "clients_per_round: ${num_clients}" in job.stdout and "imposes:" in job.stdout


@pytest.mark.parametrize(("overrides", "message"), [
    (["algorithm=fedcomp", "clients_per_round=10"], "fedcomp needs full participation: set clients_per_round=20 (got 10)"),
    (["algorithm=fednl", "clients_per_round=10"], "fednl needs full participation"),
    (["algorithm=fedda", "local_epochs=2"], "algorithm fedda imposes local_steps=5: to run epochs, also set local_steps=null"),
])
def test_an_explicit_contrary_override_gets_one_error_line(tmp_path, overrides, message):
    out = _fedbench("run", *overrides, "rounds=1", f"tracking.uri=sqlite:///{tmp_path}/m.db", cwd=tmp_path)
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], out.stderr


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_every_algorithm_runs_as_typed(tmp_path):
    """One multirun of every file of the algorithm group on the default set-up, no other override."""
    db = tmp_path / "mlflow.db"
    out = _fedbench("run", "-m", f"algorithm={','.join(ALGORITHM_FILES)}", "rounds=2", f"tracking.uri=sqlite:///{db}",
                    "tracking.artifacts=false", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    import mlflow

    runs = mlflow.MlflowClient(f"sqlite:///{db}").search_runs(
        [e.experiment_id for e in mlflow.MlflowClient(f"sqlite:///{db}").search_experiments()])
    assert sorted(r.data.tags["sweep_job"] for r in runs if r.info.status == "FINISHED") == sorted(
        str(i) for i in range(len(ALGORITHM_FILES)))
