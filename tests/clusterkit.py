"""The local cluster of the scale-out tests: scripts/local_cluster.sh (PostgreSQL, an MLflow server
on it, a Ray head and a worker node on 127.0.0.1) driven from Python, and what the tests read back."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.faultkit import ROOT, env

SCRIPT = ROOT / "scripts" / "local_cluster.sh"
PARTS = ("postgres", "mlflow", "head", "worker")


def missing() -> str | None:
    """What this machine lacks for the cluster (CI installs all of it: scripts/install_test_deps.sh)."""
    for module, extra in (("ray", "ray"), ("hydra_plugins.hydra_ray_launcher", "ray"), ("psycopg2", "postgres")):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module} is not installed (the `{extra}` extra: bash scripts/install_test_deps.sh)"
    if not (shutil.which("initdb") or list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))):
        return "PostgreSQL is not installed (apt-get install postgresql: bash scripts/install_test_deps.sh)"
    return None


class LocalCluster:
    """One `local_cluster.sh up` folder: its addresses, and its parts stopped and started again."""

    def __init__(self, folder: Path):
        self.dir = folder
        self.env = {**env(), "PYTHON": sys.executable}
        shown = self._script("up", timeout=600).stdout
        values = subprocess.run(
            ["bash", "-c", 'source "$1/env" && printf "%s\\n" "$RAY_ADDRESS" "$MLFLOW_TRACKING_URI" "$FEDBENCH_POSTGRES_URI"',
             "-", str(folder)], capture_output=True, text=True, check=True).stdout.split()
        self.ray_address, self.mlflow_uri, self.postgres_uri = values
        assert self.mlflow_uri in shown

    @classmethod
    def up(cls) -> LocalCluster:
        return cls(Path(tempfile.mkdtemp(prefix="fbc", dir="/tmp")))  # Ray's socket paths must stay short

    def _script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        out = subprocess.run(["bash", str(SCRIPT), *args, str(self.dir)], env=self.env, capture_output=True, text=True,
                             timeout=timeout)
        assert out.returncode == 0, f"local_cluster.sh {' '.join(args)} failed:\n{out.stderr[-4000:]}"
        return out

    def down(self) -> None:
        self._script("down")
        assert not self.dir.exists()

    def stop(self, part: str) -> None:
        self._script("stop", part)

    def start(self, part: str) -> None:
        self._script("start", part, timeout=300)

    def alive(self, part: str) -> bool:
        if part == "postgres":
            return (self.dir / "pg" / "postmaster.pid").exists()
        pidfile = self.dir / ("mlflow.pid" if part == "mlflow" else f"ray-{part}.pid")
        try:
            os.kill(int(pidfile.read_text()), 0)
        except (OSError, ValueError):
            return False
        return True

    def restore(self) -> None:
        """Bring back any part a test stopped or killed (the next test gets the whole cluster)."""
        for part in PARTS:
            if not self.alive(part):
                if part != "postgres":
                    self.stop(part)  # the rest of a killed process group, and its pid file
                self.start(part)

    def kill_worker(self) -> None:
        """The worker machine dies: SIGKILL to its `ray start` and everything it started."""
        pid = int((self.dir / "ray-worker.pid").read_text())
        os.killpg(pid, signal.SIGKILL)

    def worker_task_pids(self) -> list[int]:
        """Processes of the worker node running a Ray task (Ray titles them ray::<task>)."""
        group = int((self.dir / "ray-worker.pid").read_text())
        found = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and os.getpgid(int(proc.name)) == group and \
                        (proc / "cmdline").read_bytes().startswith(b"ray::_run_job"):
                    found.append(int(proc.name))
            except OSError:
                continue
        return found

    def sql(self, query: str, *args) -> list[tuple]:
        """Rows straight from the PostgreSQL database behind the MLflow server."""
        import psycopg2

        with psycopg2.connect(self.postgres_uri.replace("postgresql+psycopg2://", "postgresql://")) as conn:
            with conn.cursor() as cur:
                cur.execute(query, args)
                return cur.fetchall()

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.mlflow_uri)

    def runs(self, experiment: str) -> list:
        client = self.client()
        exp = client.get_experiment_by_name(experiment)
        return [] if exp is None else client.search_runs([exp.experiment_id])


def wait_until(condition, timeout: float, what: str, proc: subprocess.Popen | None = None, poll: float = 0.2):
    """Poll `condition` until it returns something true; fail naming `what` after `timeout` seconds,
    or at once when `proc` (the process that should make it true) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out = "".join(stream.read() for stream in (proc.stdout, proc.stderr) if stream is not None)
            raise AssertionError(f"exited with code {proc.returncode} before {what}:\n{out[-3000:]}")
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
