"""A normal (non-editable) install works: the wheel carries the Hydra configs and the papers'
numbers, and `fedbench run` runs from it in an empty folder; a user's own config folder adds groups."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.faultkit import ROOT, SMALL, error_lines, fedbench


@pytest.mark.slow
def test_the_wheel_carries_the_configs_and_runs_in_an_empty_folder(tmp_path):
    import shutil

    source = tmp_path / "source"  # a clean copy: setuptools' build/ folder in a checkout may hold stale files
    for folder in ("fedbench", "conf", "hydra_plugins"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(wheels)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = wheels.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # the top-level config tree ships as fedbench/conf; the papers' numbers as the package's own data
    for folder, pattern, inside in (("conf", "**/*.yaml", "fedbench/conf"), ("fedbench", "reproduce/papers/**/*.csv", "fedbench")):
        shipped = {f"{inside}/{p.relative_to(ROOT / folder).as_posix()}" for p in (ROOT / folder).glob(pattern)}
        assert shipped and shipped <= names, sorted(shipped - names)[:5]
    import os

    # the wheel's fedbench, not a checkout's: no step sees the caller's PYTHONPATH (under it, pip in the venv
    # took the checkout's editable install for the wheel's)
    alone = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    venv = tmp_path / "venv"  # torch and the rest come from this interpreter's site-packages
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300,
                   env=alone)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                             capture_output=True, text=True, timeout=600, env=alone)
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp_path / "empty"
    work.mkdir()
    where = subprocess.run([str(python), "-c", "import fedbench; print(fedbench.__file__)"], cwd=work,
                           capture_output=True, text=True, timeout=120, env=alone)
    assert where.stdout.strip().startswith(str(venv)), where.stdout
    run = subprocess.run([str(venv / "bin" / "fedbench"), "run", "rounds=1"], cwd=work, capture_output=True, text=True,
                         timeout=600, env=alone)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "final test accuracy" in run.stdout and (work / "outputs" / "mlflow.db").is_file()


def test_a_users_config_folder_adds_groups_and_a_missing_one_is_one_line(tmp_path):
    (tmp_path / "mine" / "algorithm").mkdir(parents=True)
    (tmp_path / "mine" / "algorithm" / "strong_prox.yaml").write_text("name: fedprox\nmu: 0.5\n")
    out = fedbench("run", "--config-dir", str(tmp_path / "mine"), "algorithm=strong_prox", "--cfg", "job", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "name: fedprox" in out.stdout and "mu: 0.5" in out.stdout
    out = fedbench("run", "--config-dir", str(tmp_path / "missing"), "rounds=1", *SMALL, cwd=tmp_path)
    assert out.returncode == 2 and error_lines(out.stderr) == [
        f"error: --config-dir {tmp_path / 'missing'}: no such folder (it adds config groups, e.g. my_conf/algorithm/x.yaml)"]
    import os

    bad = subprocess.run([sys.executable, "-m", "fedbench.cli", "run", "rounds=1"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                      "FEDBENCH_CONF": str(tmp_path / "nowhere")})
    assert bad.returncode == 2 and error_lines(bad.stderr) == [
        f"error: no config.yaml in the config directory {tmp_path / 'nowhere'} (from FEDBENCH_CONF); point "
        "FEDBENCH_CONF at a copy of conf/, or unset it to use the packaged configs"]
