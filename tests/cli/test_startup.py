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


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
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


INTERRUPTED_SUITE = '''
import subprocess, sys, time
import pytest
import fedbench.cli.app  # what every CLI test imports

@pytest.fixture(scope="session")
def worker():  # as tests/conftest.py's local_cluster: processes the session's end stops
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    with open("worker.pid", "w") as f:
        f.write(str(proc.pid))
    yield proc
    proc.terminate()
    proc.wait()

def test_waits(worker):
    print("READY", flush=True)
    time.sleep(600)
'''


def test_ctrl_c_during_the_tests_prints_the_summary_and_stops_the_sessions_processes(tmp_path):
    """Importing the CLI made Ctrl-C end any process at once (os._exit, meant for `fedbench` starting
    up): pytest printed no summary and its session fixtures' processes kept running (issue 41). Only the
    `fedbench` program itself takes over the signal while it starts."""
    import os
    import signal
    from pathlib import Path

    from tests.faultkit import env

    def as_from_a_shell():
        """Ctrl-C at its default and not blocked in the child, whatever this test worker's own disposition is (an
        ignored or blocked SIGINT is inherited across exec, and Python then never raises KeyboardInterrupt)."""
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    inherited = (signal.getsignal(signal.SIGINT), signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    (tmp_path / "test_interrupted.py").write_text(INTERRUPTED_SUITE)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_interrupted.py"],
                            cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=as_from_a_shell)
    try:
        for line in proc.stdout:
            if "READY" in line:
                break
        proc.send_signal(signal.SIGINT)
        try:
            rest = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            pytest.fail(f"pytest did not stop within 60 s of Ctrl-C (this worker's SIGINT handler and blocked: {inherited})")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED and "KeyboardInterrupt" in rest, rest[-2000:]
    assert "error: interrupted" not in rest
    pid = int((tmp_path / "worker.pid").read_text())
    stat = Path(f"/proc/{pid}/stat")
    try:
        os.kill(pid, 0)
        alive = stat.read_text().split()[2] != "Z" if stat.exists() else True  # a zombie has ended
    except (ProcessLookupError, FileNotFoundError):
        alive = False
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the session fixture's process was left running"
