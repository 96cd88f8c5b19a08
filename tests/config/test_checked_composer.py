"""A reproduction's jobs are composed once per shape (config.preflight.CheckedComposer): each job's config is
the one `fedbench run` composes and checks from its overrides, with Hydra composing only where the config
files differ."""

from __future__ import annotations

import pytest

from fedbench.config import compose as composing
from fedbench.config.preflight import CheckedComposer, JobComposer, checked_compose
from fedbench.core.errors import ConfigError
from fedbench.reproduce.catalog import load_catalog
from fedbench.reproduce.run import job_overrides, plan
from fedbench.runs.single import config_hash
from tests.conftest import assert_composed_alike

CATALOG = load_catalog()


def same_config(job_cfg, overrides: list[str]) -> None:
    reference = checked_compose(overrides)
    assert_composed_alike(job_cfg, reference, overrides)
    assert config_hash(job_cfg) == config_hash(reference), overrides


@pytest.fixture
def compositions(monkeypatch):
    """How many times Hydra composes."""
    calls = []
    real = composing._composed
    monkeypatch.setattr(composing, "_composed", lambda *a: calls.append(a) or real(*a))
    return calls


# step sizes as interpolations (composite), group changes with values of the group (fedadmm), four keys a job
@pytest.mark.parametrize("name", ["composite/fig2", "fedadmm/table3", "losac/table2"])
def test_every_job_of_a_reproduction_is_the_config_fedbench_run_composes(name, compositions):
    rep = CATALOG[name]
    scale = rep.scales["ci"]
    jobs = plan(rep, scale, "stamp")
    files = {JobComposer.files(job.overrides) for job in jobs}  # each chosen by several jobs (the seeds)
    assert len(jobs) == len(scale.runs) * len(scale.seeds)
    # each set of files: checked_compose (composing with Hydra's settings, then without) and JobComposer's base
    assert len(compositions) == 3 * len(files) < len(jobs)
    for job in jobs[:: max(1, len(jobs) // 10)] + [jobs[-1]]:
        same_config(job.cfg, job.overrides)


@pytest.mark.slow
def test_every_catalog_entry_at_every_scale_is_composed_as_fedbench_run_composes_it():
    """Each scale's first job, and its last two arms at its last seed (consecutive arms of a grid share a
    shape: the second is derived), through one composer as plan() does."""
    for name, rep in CATALOG.items():
        for scale_name, scale in rep.scales.items():
            composer = CheckedComposer()
            runs = scale.runs
            for arm, seed in ((runs[0], scale.seeds[0]), *((a, scale.seeds[-1]) for a in runs[-2:])):
                overrides = [*job_overrides(rep, scale, arm), f"seed={seed}", f"tracking.experiment={name}",
                             f"tracking.run_name=stamp-{arm.slug}", "tracking.skip_finished=false"]
                same_config(composer(overrides), overrides)


def test_a_value_a_later_job_sets_is_checked_as_fedbench_run_checks_it():
    composer = CheckedComposer()
    composer(["eta_l=0.1", "seed=0"])
    with pytest.raises(ConfigError) as derived:
        composer(["eta_l=-1", "seed=1"])
    with pytest.raises(ConfigError) as alone:
        checked_compose(["eta_l=-1", "seed=1"])
    assert str(derived.value) == str(alone.value)
    composer(["eta_l=0.1", "rounds=3"])
    with pytest.raises(ConfigError) as derived:
        composer(["eta_l=0.1", "rounds=[1,2]"])  # a list: composed by Hydra, whose error it is
    with pytest.raises(ConfigError) as alone:
        checked_compose(["eta_l=0.1", "rounds=[1,2]"])
    assert str(derived.value) == str(alone.value)


def test_jobs_with_the_files_of_an_earlier_job_are_derived_and_others_composed(compositions):
    composer = CheckedComposer()
    for job, composed in ((["algorithm=fedavg", "eta_l=0.1"], 2), (["algorithm=fedprox", "eta_l=0.1"], 2),
                          (["algorithm=fedprox", "algorithm.mu=0.5", "algorithm.mu=0.25"], 1),
                          (["algorithm=fedprox", "eta_l=0.3", "seed=4"], 0), (["algorithm=fedavg", "eta_l=0.3"], 1),
                          (["experiment=fedadmm/table3", "algorithm=fedprox"], 2),
                          (["algorithm=fedprox", "~algorithm.mu"], 2), (["algorithm=fedprox", "data.root=x"], 0)):
        before = len(compositions)
        cfg = composer(job)
        assert len(compositions) - before == composed, job
        same_config(cfg, job)


def test_the_suites_configs_are_the_ones_hydra_composes(monkeypatch, tmp_path):
    """tests/conftest.py's make_cfg composes each set of config files once and sets plain values on a copy:
    what it returns is Hydra's config for the whole line, a key Hydra refuses is Hydra's error, and a plugin's
    config folder installed or removed meanwhile is searched or not (FEDBENCH_TESTS_CHECK_DERIVED=1 checks
    every call of a whole run of the suite against Hydra's composition)."""
    import sys

    import tests.conftest as conftest
    from hydra.errors import ConfigCompositionException

    calls = []
    real = conftest.composed
    monkeypatch.setattr(conftest, "composed", lambda *o: calls.append(o) or real(*o))
    monkeypatch.setattr(conftest, "COMPOSERS", {})
    monkeypatch.setattr(conftest, "CHECK_DERIVED", False)  # its own check, below
    for line, composes in ((["algorithm=scaffold", "seed=1"], 1), (["algorithm=scaffold", "algorithm.option=I", "seed=2"], 0),
                           (["algorithm=scaffold", "targets=[0.5,0.9]", "eta_l=${eta_g}", "eta_g=0.25"], 0),
                           (["algorithm=scaffold", "model=mlp_2nn", "model.hidden=7"], 1), (["algorithm=scaffold", "+extra=1"], 1),
                           (["algorithm=scaffold", "data.root=null", "rounds=4", "rounds=5"], 0),
                           (["algorithm=scaffold", "rounds=[1,2]"], 0)):  # a list for a number: validate's to refuse
        before = len(calls)
        cfg = conftest.make_cfg(*line)
        assert len(calls) - before == composes, line
        assert_composed_alike(cfg, real(*line), line)
    assert conftest.make_cfg("algorithm=scaffold", "seed=1").seed == 1  # the cached composition was not changed
    for refused in (["algorithm=scaffold", "nokey=1"], ["algorithm=scaffold", "algorithm.nokey=1"]):
        with pytest.raises(ConfigCompositionException) as derived:
            conftest.make_cfg(*refused)
        with pytest.raises(ConfigCompositionException) as alone:
            real(*refused)
        assert str(derived.value) == str(alone.value)
    plugin = tmp_path / "site" / "myplugin"
    (plugin / "conf" / "algorithm").mkdir(parents=True)
    (plugin / "__init__.py").write_text("")
    (plugin / "conf" / "algorithm" / "mine.yaml").write_text("name: fedavg\n")
    meta = tmp_path / "site" / "myplugin-1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: myplugin\nVersion: 1.0\n")
    (meta / "entry_points.txt").write_text("[fedbench.plugins]\nmyplugin = myplugin.conf\n")
    with pytest.raises(ConfigCompositionException):
        conftest.make_cfg("algorithm=mine", "seed=1")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert conftest.make_cfg("algorithm=mine", "seed=3").algorithm.name == "fedavg"
    sys.path.remove(str(tmp_path / "site"))  # uninstalled: its choice is gone again
    with pytest.raises(ConfigCompositionException):
        conftest.make_cfg("algorithm=mine", "seed=4")
