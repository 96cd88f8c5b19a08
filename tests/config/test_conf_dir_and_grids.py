"""FEDBENCH_CONF read as a user means it, and every job of a large grid checked before the first
(issue 32, items 17 and 20)."""

from __future__ import annotations

import os
import re

import pytest

from fedbench.config import compose
from tests.bad_inputs import diagnose


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_fedbench_conf_is_unset(monkeypatch, value):
    monkeypatch.setenv("FEDBENCH_CONF", value)
    assert compose.conf_dir_from_env() == compose.PACKAGED_CONF


def test_a_relative_fedbench_conf_is_relative_to_the_current_folder(monkeypatch, tmp_path):
    (tmp_path / "my_conf").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDBENCH_CONF", "my_conf")
    assert compose.conf_dir_from_env() == tmp_path / "my_conf"
    monkeypatch.setenv("FEDBENCH_CONF", "~/x")
    assert compose.conf_dir_from_env().is_absolute() and "~" not in str(compose.conf_dir_from_env())


@pytest.mark.slow  # 2,001 jobs checked: the point of the test is the size
def test_a_bad_value_in_job_2001_of_a_grid_stops_it_before_job_0():
    # eta_l varies slowest: jobs 0..1999 are fine, job 2000 is the first with eta_l=-1
    assert diagnose("-m eta_l=0.1,0.2,-1 seed=range(0,1000)") == "eta_l must be a finite number > 0, got -1"


def test_the_grid_composer_gives_the_config_hydra_composes():
    from omegaconf import OmegaConf

    from fedbench.config.preflight import JobComposer

    composer = JobComposer(compose.conf_dir(), [])
    for job in (["seed=3", "eta_l=0.2"], ["algorithm=fedprox", "algorithm.mu=0.5", "rounds=7"],
                ["partition=iid", "targets=[0.5,0.7]", "tracking.run_name=abc"], ["data.binary_classes=[1,2]"],
                ["local_steps=null", "local_epochs=2"], ["algorithm=fedavg/adam", "eta_g=0.3"], ["+algorithm.mu=1"],
                ["partition.seed=5", "seed=2"]):
        assert OmegaConf.to_yaml(composer(job)) == OmegaConf.to_yaml(compose.compose(job)), job


@pytest.fixture
def conf_with_a_fifo(tmp_path):
    """A config folder whose algorithm/mine.yaml is a FIFO (a read of it blocks until someone writes)."""
    (tmp_path / "algorithm").mkdir()
    (tmp_path / "algorithm" / "fedavg.yaml").write_text("name: fedavg\n")
    os.mkfifo(tmp_path / "algorithm" / "mine.yaml")
    return tmp_path


def test_every_reader_of_a_config_folder_names_a_fifo_instead_of_blocking(conf_with_a_fifo, monkeypatch):
    """`fedbench list` and `fedbench run mu=0.1` (which looks for the group that sets mu) read every *.yaml of the
    folder: they blocked forever on the FIFO; `algorithm=mine` said "Unknown algorithm 'mine'" beside it."""
    from fedbench.cli import listing
    from fedbench.config.compose import group_choices
    from fedbench.config.suggest import group_files_with_key
    from fedbench.core.errors import ConfigError

    needle = f"{conf_with_a_fifo / 'algorithm' / 'mine.yaml'} is a FIFO, not a config file"
    with pytest.raises(ConfigError, match=re.escape(needle)):
        group_choices(conf_with_a_fifo, "algorithm")
    with pytest.raises(ConfigError, match=re.escape(needle)):
        group_files_with_key(conf_with_a_fifo, "mu", ["algorithm"])
    monkeypatch.setattr(listing, "config_folders", lambda: [conf_with_a_fifo])
    with pytest.raises(ConfigError, match=re.escape(needle)):
        listing.config_options("algorithm")


def test_a_fifo_among_the_files_hydra_composes_from_is_named_at_start(tmp_path, monkeypatch):
    """With FEDBENCH_CONF's dataset/digits.yaml a FIFO, the default run said "Unknown dataset 'digits'"."""
    import shutil

    from fedbench.core.errors import ConfigError

    shutil.copytree(compose.PACKAGED_CONF, tmp_path / "conf")
    (tmp_path / "conf" / "dataset" / "digits.yaml").unlink()
    os.mkfifo(tmp_path / "conf" / "dataset" / "digits.yaml")
    monkeypatch.setattr(compose, "CONF_DIR", tmp_path / "conf")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'conf' / 'dataset' / 'digits.yaml'} is a FIFO")):
        compose.checked_conf_dir()



@pytest.mark.parametrize("text", ["42", "just text", "- a list", "algorithm: 5", "algorithm: {imposes: 5}", "defaults: 5"])
def test_list_shows_a_config_file_of_a_bare_value(tmp_path, monkeypatch, text):
    """A config folder's file holding no mapping (a number, a string, a list) or odd sections: `fedbench list`
    was an AttributeError traceback; it lists the name (`run` names the file in one line: tests/bad_inputs.py)."""
    import shutil

    from typer.testing import CliRunner

    from fedbench.cli.app import app

    shutil.copytree(compose.PACKAGED_CONF, tmp_path / "conf")
    for name in ("fedprox", "mine"):
        (tmp_path / "conf" / "algorithm" / f"{name}.yaml").write_text(text + "\n")
    monkeypatch.setenv("FEDBENCH_CONF", str(tmp_path / "conf"))
    monkeypatch.setattr(compose, "CONF_DIR", tmp_path / "conf")
    out = CliRunner().invoke(app, ["list"])
    assert out.exit_code == 0 and out.exception is None, out.output
    assert re.search(r"^  mine ", out.stdout, re.M) and re.search(r"^  fedprox ", out.stdout, re.M), out.stdout
