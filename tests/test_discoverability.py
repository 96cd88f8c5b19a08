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
    from fedbench.data.datasets import fmnist_folder

    names = {line.split()[0] for line in listing.splitlines() if line.startswith("  ") and line.split()}
    for group in ("algorithm", "dataset", "partition", "model"):
        for path in (Path(CONF) / group).glob("*.yaml"):
            assert path.stem in names, f"{group}={path.stem} is not listed"
    assert any(line.split()[:3] == ["scaffold_prox", "->", "scaffold:"] for line in listing.splitlines())
    assert any(line.split()[:3] == ["losac_paper", "->", "losac:"] for line in listing.splitlines())
    presets = {str(p.relative_to(Path(CONF) / "experiment").with_suffix("")) for p in (Path(CONF) / "experiment").rglob("*.yaml")}
    assert presets <= set(listing.split())
    fmnist = next(line for line in listing.splitlines() if line.split()[:1] == ["fmnist"])
    found = fmnist_folder()
    assert (f"[found: {found}]" in fmnist) if found else ("apt-get install dataset-fashion-mnist" in fmnist)


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
    from fedbench import preflight
    from fedbench.errors import ConfigError

    monkeypatch.setitem(preflight.PLUGINS, ("launcher", "joblib"), ("hydra_plugins.not_installed_here", "pip install -e '.[sweeps]'"))
    with pytest.raises(ConfigError, match=r"hydra/launcher=joblib needs a Hydra plugin that is not installed: pip install"):
        preflight.check_plugins(["hydra/launcher=joblib", "seed=0,1"])
    preflight.check_plugins(["hydra/launcher=basic"])  # Hydra's own: nothing to install


def test_missing_fashion_mnist_names_the_debian_package():
    from fedbench.data.datasets import _fmnist_folders, _missing_hint

    assert _missing_hint("fmnist", _fmnist_folders("/nowhere")).endswith(
        "(on Debian/Ubuntu: apt-get install dataset-fashion-mnist)")
