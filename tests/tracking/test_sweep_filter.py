"""A sweep's printed `fedbench report` command finds exactly its runs, whatever its folder is called."""

from __future__ import annotations

import shlex

import pytest
from omegaconf import OmegaConf

from fedbench.runs.callbacks import report_command
from fedbench.tracking.sweeps import SWEEPS_TAG, with_sweep


@pytest.mark.parametrize("name", ["sweep", "it's mine", 'say "hi"', "both ' and \"", "$HOME `x` !1 \\n", "a_b%c"])
def test_the_printed_filter_is_one_shell_word_that_finds_the_sweeps_runs_only(tmp_path, name):
    from mlflow import MlflowClient

    sweep_dir = tmp_path / name
    uri = f"sqlite:///{tmp_path}/m.db"
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}, "overrides": {"task": []}},
                               "tracking": {"experiment": "x", "uri": uri}, "targets": []})
    words = shlex.split(report_command(config))
    assert words[:4] == ["fedbench", "report", "--experiment", "x"] and words[4] == "--filter"
    client = MlflowClient(uri)
    experiment = client.create_experiment("x")
    ours, other = client.create_run(experiment), client.create_run(experiment)
    client.set_tag(ours.info.run_id, SWEEPS_TAG, with_sweep(with_sweep(None, f"{tmp_path}/before"), str(sweep_dir)))
    client.set_tag(other.info.run_id, SWEEPS_TAG, with_sweep(None, f"{tmp_path}/{name}-2"))
    found = client.search_runs([experiment], words[5])
    assert [r.info.run_id for r in found] == [ours.info.run_id]
