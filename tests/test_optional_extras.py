"""A missing optional extra (the peer frameworks, the Optuna sweeper) skips the tests that need it
and the rest of the suite runs; under CI=true, where every extra is installed, its absence fails them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDS_NO_EXTRA = "tests/core/test_layers.py"


def pytest_without(tmp_path, hidden: list[str], test_file: str, ci: bool):
    """Run pytest on one test file and a test file that needs no extra, in a fresh interpreter in which `hidden` cannot be imported
    (a None entry in sys.modules: find_spec returns None, import raises ImportError)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in hidden))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--rootdir", str(ROOT), str(ROOT / test_file), str(ROOT / NEEDS_NO_EXTRA)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # four pytest processes
@pytest.mark.parametrize(("hidden", "test_file"), [
    (["flwr", "pfl"], "tests/scripts/test_bench_peers.py"),
    (["hydra_plugins.hydra_optuna_sweeper"], "tests/runs/test_optuna_sweeper.py"),
])
def test_a_missing_extra_skips_its_tests_and_fails_them_in_ci(tmp_path, hidden, test_file):
    alone = pytest_without(tmp_path, hidden, test_file, ci=False)
    out = alone.stdout + alone.stderr
    assert alone.returncode == 0, out[-3000:]  # not 2: interrupted at collection, the other file never ran
    assert " passed" in out and " skipped" in out and "error" not in out.lower(), out[-3000:]
    in_ci = pytest_without(tmp_path, hidden, test_file, ci=True)
    assert in_ci.returncode != 0, (in_ci.stdout + in_ci.stderr)[-3000:]
    assert "mandatory in CI" in in_ci.stdout + in_ci.stderr
