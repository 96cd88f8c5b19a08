"""What a new user reads: `fedbench list` names every selectable config, `run --help` the top-level
keys, typos get "did you mean", missing plugins and data name what installs them (issue 22)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CONF
from tests.faultkit import error_lines, fedbench


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    out = fedbench("list", cwd=tmp_path_factory.mktemp("list"))
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_list_shows_every_config_file_variants_and_presets(listing):
    from fedbench.data.locations import fmnist_folder

    names = {line.split()[0] for line in listing.splitlines() if line.startswith("  ") and line.split()}
    for group in ("algorithm", "dataset", "partition", "model"):
        for path in (Path(CONF) / group).glob("*.yaml"):
            assert path.stem in names, f"{group}={path.stem} is not listed"
    presets = {str(p.relative_to(Path(CONF) / "experiment").with_suffix("")) for p in (Path(CONF) / "experiment").rglob("*.yaml")}
    assert presets <= set(listing.split())
    fmnist = next(line for line in listing.splitlines() if line.split()[:1] == ["fmnist"])
    found = fmnist_folder()
    assert (f"[found: {found}]" in fmnist) if found else ("apt-get install dataset-fashion-mnist" in fmnist)


def _section(listing: str, header: str) -> list[str]:
    """The lines under the header line that starts with `header`, up to the next header."""
    lines = listing.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start + 1:end]


def test_list_shows_an_algorithms_variants_beneath_it(listing):
    """algorithm/<name>/<variant>.yaml: one line each, indented under the algorithm it varies."""
    lines = _section(listing, "algorithms (algorithm=<name>)")
    for variant in sorted(p.relative_to(Path(CONF) / "algorithm").with_suffix("").as_posix()
                          for p in (Path(CONF) / "algorithm").glob("*/*.yaml")):
        at = next(i for i, line in enumerate(lines) if line.split()[:1] == [variant])
        assert lines[at].startswith("    ")
        parent = next(line for line in reversed(lines[:at]) if line.startswith("  ") and not line.startswith("   "))
        assert parent.split()[0] == variant.split("/")[0], (variant, parent)
    scaffold_prox = next(line for line in lines if line.split()[:1] == ["scaffold/prox"])
    assert "SCAFFOLD-Prox" in scaffold_prox


@pytest.mark.parametrize(("group", "title"), [("dataset", "datasets"), ("model", "models")])
def test_list_shows_generic_choices_then_one_line_per_paper(listing, group, title):
    """<group>/<name>.yaml are the generic choices (with what they are); <group>/<paper>/<name>.yaml
    one line per paper: `fedadmm  cnn1, cnn2, fc` selects model=fedadmm/cnn1 etc."""
    generic = _section(listing, f"{title} ({group}=<name>)")
    assert [line.split()[0] for line in generic] == sorted(p.stem for p in (Path(CONF) / group).glob("*.yaml"))
    papers = _section(listing, f"{title} of one paper's setting ({group}=<paper>/<name>)")
    shown = {line.split()[0]: line.split(None, 1)[1].split(", ") for line in papers}
    expected: dict[str, list[str]] = {}
    for path in sorted((Path(CONF) / group).glob("*/*.yaml")):
        expected.setdefault(path.parent.name, []).append(path.stem)
    assert shown == expected
    if group == "model":
        assert shown["fedadmm"] == ["cnn1", "cnn2", "fc"] and "lenet" in shown["fedspeed"] and "lenet" in shown["fedsso"]
    else:
        assert shown["fedsso"] == ["cifar10", "emnist", "ijcnn1", "mnist"]
        cifar10_half = next(line for line in generic if line.split()[:1] == ["cifar10_half"])
        assert cifar10_half.split()[1:3] == ["->", "cifar10:"]  # a generic file selecting another registered name


def test_run_help_lists_top_level_keys_and_hydra_help_offers_no_broken_completion(tmp_path):
    out = fedbench("run", "--help", cwd=tmp_path)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    for needle in ("rounds=30", "clients_per_round=10", "eta_l=0.1", "dataset=digits", "algorithm=fedavg"):
        assert needle in text
    hydra_help = fedbench("run", "--hydra-help", cwd=tmp_path)
    assert hydra_help.returncode == 0 and "--config-dir" in hydra_help.stdout and "-sc" not in hydra_help.stdout
    completion = fedbench("run", "-sc", "install=bash", cwd=tmp_path)
    assert completion.returncode == 2 and len(error_lines(completion.stderr)) == 1
    assert "shell completion is not available" in completion.stderr


def test_a_missing_launcher_names_what_installs_it(monkeypatch):
    from fedbench.config import preflight
    from fedbench.core.errors import ConfigError

    monkeypatch.setitem(preflight.PLUGINS, ("launcher", "joblib"), ("hydra_plugins.not_installed_here", "pip install -e '.[sweeps]'"))
    with pytest.raises(ConfigError, match=r"hydra/launcher=joblib needs a Hydra plugin that is not installed: pip install"):
        preflight.check_plugins(["hydra/launcher=joblib", "seed=0,1"])
    preflight.check_plugins(["hydra/launcher=basic"])  # Hydra's own: nothing to install


def test_missing_fashion_mnist_names_the_debian_package():
    from fedbench.data.datasets import _missing_hint, fmnist_folders

    assert _missing_hint("fmnist", fmnist_folders("/nowhere")).endswith(
        "(on Debian/Ubuntu: apt-get install dataset-fashion-mnist)")


def test_mlflow_runs_have_readable_names_a_source_and_open_on_the_runs_table(tmp_path):
    from mlflow.tracking import MlflowClient

    from fedbench.runs.single import run_job
    from tests.conftest import make_cfg
    from tests.faultkit import SMALL

    uri = f"sqlite:///{tmp_path}/m.db"
    run_job(make_cfg(f"tracking.uri={uri}", *SMALL, "rounds=1", "partition.alpha=0.1", "seed=3"), tmp_path / "a",
            quiet=True)
    run_job(make_cfg(f"tracking.uri={uri}", *SMALL, "rounds=1", "partition=iid", "algorithm=fedprox",
                     "tracking.run_name=mine"), tmp_path / "b", quiet=True)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("fedbench")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    found = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(found) == {"fedavg-digits-dir0.1-s3", "mine"}
    from fedbench.tracking.recorder import git_commit, readable_run_name

    cfg = make_cfg("partition.alpha=0.5")  # a grid's jobs are told apart by their other overrides (issue 33)
    names = {readable_run_name(cfg, f"algorithm=fedavg eta_l={lr} seed=0 tracking.uri=x") for lr in (0.03, 0.1, 0.3)}
    assert names == {f"fedavg-digits-dir0.5-s0 eta_l={lr}" for lr in (0.03, 0.1, 0.3)}
    tags = found["mine"].data.tags
    assert tags["mlflow.source.name"] == "fedbench run" and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.user"] and tags["fedbench_version"]
    commit = git_commit()  # from a copy without .git (git archive, a release), there is none to record (issue 41)
    if commit == "unknown":
        assert "mlflow.source.git.commit" not in tags and "git_commit" not in tags
    else:
        assert tags["mlflow.source.git.commit"] == tags["git_commit"] == commit


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_sweep_output_names_each_job_logs_plain_lines_and_fills_the_job_log(tmp_path):
    """Not on a terminal (a pipe here): plain progress lines instead of bar redraws; each line and
    summary says its job; the MLflow hint once per sweep; Hydra's job log holds the job's lines."""
    from tests.faultkit import SMALL

    out = fedbench("run", "-m", "seed=0,1", "rounds=20", *SMALL, f"tracking.uri=sqlite:///{tmp_path}/m.db",
                   f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "\r" not in out.stderr
    for job in (0, 1):
        progress = [line for line in out.stderr.splitlines() if line.startswith(f"fedbench: [job {job}] round ")]
        assert [line.split()[4] for line in progress] == [f"{r}/20" for r in range(2, 21, 2)]
        assert f"[job {job}] final test accuracy" in out.stdout
        assert any(line.startswith(f"fedbench: [job {job}] overrides: seed={job} rounds=20") for line in out.stderr.splitlines())
        [log] = (tmp_path / "sweep" / str(job)).glob("*.log")
        text = log.read_text()
        assert "round 20/20" in text and "final test accuracy" in text
    assert out.stdout.count("mlflow ui --backend-store-uri") == 1
    # one format for every line of a sweep, Hydra's own included, and the sweep's table ready to paste (issue 33)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert lines and all(line.startswith("fedbench: ") for line in lines), [x for x in lines if not x.startswith("fedbench: ")]
    assert (f"fedbench: its table: fedbench report --experiment fedbench --filter \"tags.sweep_dirs LIKE "
            f"'%|{tmp_path}/sweep|%'\" --uri sqlite:///{tmp_path}/m.db --target 0.8") in out.stdout


@pytest.mark.slow
def test_a_relaunched_sweeps_table_covers_its_whole_grid_and_the_batched_launcher_speaks_in_one_format(tmp_path):
    """Relaunched into a new folder with a larger grid, a sweep skips the jobs that FINISHED: its printed
    `fedbench report` still covers every job of its grid (the skipped ones carried the first sweep's
    folder), and the first sweep's command still covers its own. The batched launcher's lines are all
    `fedbench: ...`, and a lane's time says it is its share of the lanes trained together, whose
    wall-clock time follows (issue 41)."""
    import re
    import shlex

    from tests.faultkit import SMALL

    common = ["rounds=2", *SMALL, f"tracking.uri=sqlite:///{tmp_path}/m.db"]
    first = fedbench("run", "-m", "seed=0,1", *common, f"hydra.sweep.dir={tmp_path}/a", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    again = fedbench("run", "-m", "hydra/launcher=batched", "seed=0,1,2,3", *common, f"hydra.sweep.dir={tmp_path}/b",
                     cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("skipped, this configuration FINISHED") == 2
    lines = [line for line in (again.stdout + again.stderr).splitlines() if line.strip()]
    assert all(line.startswith("fedbench: ") for line in lines), [x for x in lines if not x.startswith("fedbench: ")]
    shares = [line for line in lines if "] training time" in line]
    assert len(shares) == 2 and all("its share as 1 of 2 lanes trained together" in line for line in shares), shares
    assert re.search(r"fedbench: group of job\(s\) 0, 1, 2, 3: \d+\.\d s of wall-clock time", again.stdout)

    def covered(out) -> list[str]:
        [command] = [line.removeprefix("fedbench: its table: ") for line in out.stdout.splitlines() if "its table:" in line]
        table = fedbench(*shlex.split(command)[1:], "--setting", "seed", cwd=tmp_path)
        assert table.returncode == 0, table.stderr
        return sorted(re.findall(r"seed=(\d)", table.stdout))

    assert covered(again) == ["0", "1", "2", "3"]
    assert covered(first) == ["0", "1"]
