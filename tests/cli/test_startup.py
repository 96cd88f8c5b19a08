"""Start-up (issue 20): `fedbench --help` and `fedbench list` import neither torch nor pandas, the
registrations `list` reads from source are exactly the registries', and `fedbench run` leaves MLflow
and the run's curves to its writer process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedbench.core.registry import declared

PROBE = """
import sys
from fedbench.cli.app import app
try:
    app({args!r})
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "pandas", "mlflow", "torchvision", "sklearn", "matplotlib") if m in sys.modules)
print("HEAVY", heavy)
"""


@pytest.mark.parametrize("args", [["--help"], ["list"], ["run", "--help"]])
def test_light_commands_import_no_heavy_library(args):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout, proc.stdout[-500:]


RUN_PROBE = """
import sys
from fedbench.cli.app import app
try:
    app({args!r})
except SystemExit as exc:
    print("EXIT", exc.code)
print("LOADED", sorted(m for m in ("mlflow", "sqlalchemy", "alembic", "pandas", "matplotlib", "torch._dynamo", "sympy")
                       if m in sys.modules))
"""


def test_a_run_leaves_mlflow_pandas_and_matplotlib_to_its_writer(tmp_path):
    """... and the default run (MCLR, `auto` -> stacked on a CPU) never imports torch._dynamo and sympy,
    which torch.func's grad does (0.9 s)."""
    from tests.faultkit import SMALL, env, runs

    args = ["run", *SMALL, "engine.executor=auto", "engine.device=cpu", "rounds=2", "tracking.artifacts=true", f"tracking.uri=sqlite:///{tmp_path}/m.db",
            f"hydra.run.dir={tmp_path}/run"]
    proc = subprocess.run([sys.executable, "-c", RUN_PROBE.format(args=args)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env())
    assert "EXIT 0" in proc.stdout, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout, proc.stdout[-500:]
    client, [run] = runs(tmp_path / "m.db")
    assert run.info.status == "FINISHED" and {a.path for a in client.list_artifacts(run.info.run_id)} >= {"curves.png"}


def test_declared_registrations_equal_the_registries():
    from fedbench.algorithms import load_all
    from fedbench.data import DATASETS, PARTITIONS
    from fedbench.models import MODELS

    for kind, registry in (("algorithm", load_all()), ("dataset", DATASETS), ("partition", PARTITIONS), ("model", MODELS)):
        assert declared(kind) == registry.describe(), kind


def test_a_light_data_module_loads_alone_and_the_registry_fills_itself():
    code = ("import sys; import fedbench.data.locations; assert 'torch' not in sys.modules; "
            "from fedbench.data.datasets import DATASETS; assert 'cifar10' in DATASETS and 'no_such_set' not in DATASETS; "
            "from fedbench.data.partitions import PARTITIONS; assert 'quantity_skew' in PARTITIONS")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_command_exits_with_its_code_after_the_atexit_handlers_and_flushed_streams():
    code = ("import atexit, sys; from fedbench.cli.app import exit_now; "
            "atexit.register(lambda: print('atexit ran')); print('out', end=''); sys.stderr.write('err'); "
            "exit_now({code!r})")
    for given, status, stderr in ((None, 0, "err"), (3, 3, "err"), ("a message", 1, "erra message\n")):
        proc = subprocess.run([sys.executable, "-c", code.format(code=given)], capture_output=True, text=True, timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (status, "outatexit ran\n", stderr)
