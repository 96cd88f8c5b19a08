"""The local cluster of the scale-out tests: scripts/local_cluster.sh (PostgreSQL, an MLflow server
on it, a Ray head and a worker node on 127.0.0.1) driven from Python, and what the tests read back."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.faultkit import ROOT, env

SCRIPT = ROOT / "scripts" / "local_cluster.sh"
PARTS = ("postgres", "mlflow", "head", "worker")
CLUSTER_PYTHON = "/opt/fedbench-cluster/bin/python"  # scripts/install_cluster_python.sh's
MLFLOW_USER = "fedbench-mlflow"  # who runs the MLflow server when the script runs as root
# As root, `up` runs Ray's nodes as the user FEDBENCH_RAY_USER names. The suite's cluster runs fedbench's
# jobs, whose interpreter here is root's (under /root, mode 700): it says root, out loud; the nodes as
# another user are tests/runs/test_security.py's (a Ray task, from install_cluster_python.sh's Ray).
RAY_AS_ROOT = {"FEDBENCH_RAY_USER": "root"} if os.geteuid() == 0 else {}


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
    if os.geteuid() == 0 and not (os.environ.get("FEDBENCH_CLUSTER_PYTHON") or Path(CLUSTER_PYTHON).exists()
                                  or reachable_by_all(Path(sys.executable))):
        return (f"as root the MLflow server runs unprivileged, and {sys.executable} is out of its reach: "
                "bash scripts/install_cluster_python.sh")
    return None


def reachable_by_all(path: Path) -> bool:
    """Every folder above `path` lets any user through (an interpreter under /root does not)."""
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.resolve().parents)


class LocalCluster:
    """One `local_cluster.sh up` folder: its addresses, and its parts stopped and started again."""

    def __init__(self, folder: Path):
        self.dir = folder
        self.env = {**env(), "PYTHON": sys.executable, **RAY_AS_ROOT}
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

    def wait_idle(self, timeout: float = 120) -> None:
        """Wait until both nodes are alive and every CPU is free: a task an earlier test left (a job
        its driver's exit is still tearing down) would otherwise keep a node from a test that needs both."""
        script = """import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + float(sys.argv[2])
while True:
    alive, free, total = (len([n for n in ray.nodes() if n["Alive"]]), ray.available_resources().get("CPU", 0),
                          ray.cluster_resources().get("CPU", 0))
    if alive == 2 and free == total > 0:
        sys.exit(0)
    if time.monotonic() > deadline:
        sys.exit(f"{alive} live node(s), {free} of {total} CPUs free")
    time.sleep(0.5)
"""
        out = subprocess.run([sys.executable, "-c", script, self.ray_address, str(timeout)], env={**env(), **self.exported},
                             capture_output=True, text=True, timeout=timeout + 60)
        assert out.returncode == 0, f"the cluster did not become idle in {timeout:.0f} s: {out.stderr[-2000:]}"

    def ray_processes(self) -> list[tuple[int, int, str]]:
        """(pid, process group, title) of every Ray process on this machine (for a failure's message)."""
        found = []
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
                if proc.name.isdigit() and title.startswith("ray::"):
                    found.append((int(proc.name), os.getpgid(int(proc.name)), title))
        return found

    def token(self) -> str:
        return (self.dir / "ray.token").read_text()

    def ray_endpoints(self) -> list[tuple[str, str, int]]:
        """(what, protocol, port) of every Ray service that takes requests: the GCS and the client
        server, and each node's raylet, runtime-env agent and dashboard agent (from the GCS's node
        table, read with the token)."""
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

        with grpc.insecure_channel(self.ray_address) as channel:
            nodes = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
                gcs_service_pb2.GetAllNodeInfoRequest(), timeout=30, metadata=bearer(self.token())).node_info_list
        found = [("GCS", "gcs", int(self.ray_address.rsplit(":", 1)[1])),
                 ("Ray client server", "client", int(self.exported["RAY_CLIENT_SERVER_PORT"]))]
        for i, node in enumerate(n for n in nodes if n.state == 0):  # ALIVE
            found += [(f"raylet {i}", "raylet", node.node_manager_port),
                      (f"runtime-env agent {i}", "http", node.runtime_env_agent_port),
                      (f"dashboard agent {i}", "http", node.dashboard_agent_listen_port)]
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


def bearer(token: str) -> list[tuple[str, str]]:
    """Ray's authentication header (what its clients send when RAY_AUTH_MODE=token)."""
    return [("authorization", f"Bearer {token}")]


def ray_answer(protocol: str, port: int, token: str | None) -> str:
    """How a Ray service on 127.0.0.1:`port` answers one harmless request sent with `token` (None:
    no header): "ok", or the refusal (gRPC's status name, HTTP's status code)."""
    import urllib.error
    import urllib.request

    import grpc
    from ray.core.generated import (
        gcs_service_pb2,
        gcs_service_pb2_grpc,
        node_manager_pb2,
        node_manager_pb2_grpc,
        ray_client_pb2,
        ray_client_pb2_grpc,
    )

    metadata = bearer(token) if token is not None else None
    if protocol == "http":  # the agents answer 404 for / once past the authentication
        request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers=dict(metadata or []))
        try:
            with urllib.request.urlopen(request, timeout=30):
                return "ok"
        except urllib.error.HTTPError as e:
            return "ok" if e.code == 404 else f"HTTP {e.code}"
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = {"gcs": lambda: gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
                    gcs_service_pb2.GetClusterIdRequest(), timeout=30, metadata=metadata),
                "client": lambda: ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(
                    ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING), timeout=30,
                    metadata=metadata),
                "raylet": lambda: node_manager_pb2_grpc.NodeManagerServiceStub(channel).GetSystemConfig(
                    node_manager_pb2.GetSystemConfigRequest(), timeout=30, metadata=metadata)}[protocol]
        try:
            call()
        except grpc.RpcError as e:
            return e.code().name
        return "ok"


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
