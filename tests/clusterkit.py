"""The local cluster of the scale-out tests: scripts/local_cluster.sh (PostgreSQL, an MLflow server
on it, a Ray head and a worker node on 127.0.0.1) driven from Python, and what the tests read back."""

from __future__ import annotations

import contextlib
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
        self.exported = exported(folder / "env")
        self.ray_address, self.mlflow_uri, self.postgres_uri = (
            self.exported[k] for k in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "FEDBENCH_POSTGRES_URI"))
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

    def ray_processes(self) -> list[tuple[int, int, str]]:
        """(pid, process group, title) of every Ray process on this machine (for a failure's message)."""
        found = []
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
                if proc.name.isdigit() and title.startswith("ray::"):
                    found.append((int(proc.name), os.getpgid(int(proc.name)), title))
        return found

    def sql(self, query: str, *args) -> list[tuple]:
        """Rows straight from the PostgreSQL database behind the MLflow server (as its owner role,
        with the password DIR/env keeps)."""
        import psycopg2

        with psycopg2.connect(self.postgres_uri.replace("postgresql+psycopg2://", "postgresql://"),
                              password=self.exported["PGPASSWORD"]) as conn:
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


def exported(env_file: Path) -> dict[str, str]:
    """The variables `source DIR/env` exports (what a user's shell gets)."""
    def env_after(script: str) -> dict[str, str]:
        out = subprocess.run(["bash", "-c", f"{script} env -0", "-", str(env_file)], env={"PATH": os.environ["PATH"]},
                             capture_output=True, check=True).stdout.decode()
        return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)

    before, after = env_after(""), env_after('source "$1";')
    return {k: v for k, v in after.items() if before.get(k) != v}


def process_groups(folder: Path) -> set[int]:
    """The processes of a cluster: the process groups `start_bg` made (Ray's nodes and their workers,
    the MLflow server) and PostgreSQL's postmaster."""
    groups = set()
    for name in ("ray-head", "ray-worker", "mlflow"):
        with contextlib.suppress(OSError, ValueError):
            groups.add(int((folder / f"{name}.pid").read_text()))
    pids = set()
    with contextlib.suppress(OSError, ValueError, IndexError):
        pids.add(int((folder / "pg" / "postmaster.pid").read_text().split()[0]))
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(proc.name)) in groups:
                    pids.add(int(proc.name))
    return pids


def listening_sockets(pids: set[int]) -> list[tuple[str, int, int, str]]:
    """(address, port, pid, command) of every TCP socket the processes `pids` listen on, read from
    /proc (no ss or psutil needed)."""
    import ipaddress

    listening: dict[int, tuple[str, int]] = {}  # socket inode -> (address, port)
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":  # TCP_LISTEN
                    continue
                hex_addr, hex_port = fields[1].split(":")
                raw = bytes.fromhex(hex_addr)
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # per 32-bit word, host order
                listening[int(fields[9])] = (str(ipaddress.ip_address(raw)), int(hex_port, 16))
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            command = (Path(f"/proc/{pid}/comm")).read_text().strip()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:[") and int(target[8:-1]) in listening:
                        found.append((*listening[int(target[8:-1])], pid, command))
    return found


def is_loopback(address: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


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
