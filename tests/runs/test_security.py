"""Nothing exposed (issue 32): passwords in a store URI are never recorded or printed, and
scripts/local_cluster.sh listens on loopback only, asks PostgreSQL for a password, and deletes only
the folder it made. The cluster tests share tests/conftest.py's one cluster (slow); the others run
in seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clusterkit import (
    CLUSTER_PYTHON,
    MLFLOW_USER,
    RAY_AS_ROOT,
    SCRIPT,
    is_loopback,
    listening_sockets,
    process_groups,
    ray_answer,
    reachable_by_all,
    wait_until,
)
from tests.faultkit import SMALL, env, error_lines, fedbench

SECRET = "Hunter2-s3cret-pw"


def script(*args: str, **settings: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env={**env(), "PYTHON": sys.executable, **RAY_AS_ROOT, **settings},
                          capture_output=True, text=True, timeout=120)


def files_holding(folder: Path, needle: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


# -- redaction (core.secrets), without a server ------------------------------------------------


@pytest.mark.parametrize("uri", [f"http://alice:{SECRET}@127.0.0.1:1",
                                 f"postgresql+psycopg2://alice:{SECRET}@127.0.0.1:1/mlflow",
                                 f"'postgresql://127.0.0.1:1/mlflow?user=alice&password={SECRET}'"])  # Hydra: quote the '='s
def test_a_store_password_is_neither_printed_nor_left_in_the_run_folder(tmp_path, uri):
    out = fedbench("run", *SMALL, "rounds=1", f"tracking.uri={uri}", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path,
                   timeout=120)
    assert out.returncode != 0 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert SECRET not in out.stdout + out.stderr
    assert "alice" in out.stderr or "127.0.0.1:1" in out.stderr  # the line still names the store
    assert files_holding(tmp_path, SECRET) == []


def test_redact_masks_every_form_and_withhold_reveal_round_trip(monkeypatch):
    from fedbench.core.secrets import PASSWORD_ENV, redact, reveal, withhold

    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    for text, shown in [
        (f"http://alice:{SECRET}@host:5000/x", "http://alice:***@host:5000/x"),
        (f"store postgresql+psycopg2://u:{SECRET}@h/db failed", "store postgresql+psycopg2://u:***@h/db failed"),
        (f"mysql://h/db?user=u&Password={SECRET}&ssl=1", "mysql://h/db?user=u&Password=***&ssl=1"),
        (f"http://:{SECRET}@h", "http://:***@h"),
        ("http://127.0.0.1:5000/#/experiments/1", "http://127.0.0.1:5000/#/experiments/1"),
    ]:
        assert redact(text) == shown
    [uri] = withhold([f"tracking.uri=postgresql+psycopg2://u:{SECRET.replace('-', '%2D')}@h:5/db"])
    assert uri == "tracking.uri=postgresql+psycopg2://u@h:5/db" and os.environ[PASSWORD_ENV] == SECRET
    assert reveal("postgresql+psycopg2://u@h:5/db") == f"postgresql+psycopg2://u:{SECRET}@h:5/db"
    assert redact(f"a library echoed {SECRET}") == "a library echoed ***"  # a password fedbench holds


# -- secrets in every file a run writes, whatever the channel (issue 42, section 3) -------------


def config_dir_with_uri(folder: Path, uri: str) -> Path:
    """A --config-dir whose tracking option names `uri` (a store URI written in a file)."""
    import re

    from fedbench.config.compose import conf_dir

    (folder / "tracking").mkdir(parents=True)
    text = (conf_dir() / "tracking" / "mlflow.yaml").read_text()
    (folder / "tracking" / "mine.yaml").write_text(re.sub(r"(?m)^(\s*uri:).*$", lambda m: f'{m.group(1)} "{uri}"', text))
    return folder


@pytest.mark.parametrize(("channel", "password"), [("override", "pw/with-slash"), ("override", "pw#with-hash"),
                                                   ("override", "pw?with-question"), ("config-dir", "pw#with/both"),
                                                   ("env_set", "pw/with-slash")])
def test_a_password_sqlalchemy_reads_is_withheld_from_every_file_whatever_its_channel(tmp_path, channel, password):
    """SQLAlchemy's password runs to the first '@' ('/', '#', '?' included); fedbench's parser agrees,
    and .hydra/ (written by Hydra itself) holds no password from a config file or env_set either."""
    secret = f"{SECRET}-{password}"
    uri = f"postgresql+psycopg2://alice:{secret}@127.0.0.1:1/mlflow"
    args = {"override": [f"tracking.uri={uri}"],
            "config-dir": ["tracking=mine"],
            "env_set": ["tracking.uri=postgresql+psycopg2://alice@127.0.0.1:1/mlflow",
                        f"+hydra.job.env_set.MLFLOW_TRACKING_PASSWORD={secret}"]}[channel]
    flags = ["--config-dir", str(config_dir_with_uri(tmp_path / "my_conf", uri))] if channel == "config-dir" else []
    out = fedbench("run", *flags, *SMALL, "rounds=1", *args, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=120)
    assert out.returncode != 0 and len(error_lines(out.stderr)) == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "cannot reach" in out.stderr and "alice" in out.stderr  # the store's own error, its user named
    assert secret not in out.stdout + out.stderr
    assert [p for p in files_holding(tmp_path, secret) if "my_conf" not in p.parts] == []


def test_one_parser_reads_a_database_uri_as_sqlalchemy_does(monkeypatch):
    from sqlalchemy.engine import make_url

    from fedbench.core.errors import ConfigError
    from fedbench.core.secrets import PASSWORD_ENV, redact, reveal, split_password

    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    for uri in ("postgresql://u:a/b#c?d@h:5/db?sslmode=require", "mysql+pymysql://u:p%40ss@h/db", "postgresql://h/db?user=u&password=x/y"):
        public, password = split_password(uri)
        url = make_url(uri)
        assert password == (url.password if url.password is not None else url.query["password"])
        assert make_url(public).password is None and "password" not in make_url(public).query
        assert (make_url(public).host, make_url(public).port, make_url(public).database) == (url.host, url.port, url.database)
        monkeypatch.setenv(PASSWORD_ENV, password)
        again = make_url(reveal(public))
        assert (again.password or again.query.get("password")) == password
        assert password not in redact(f"store {uri} failed")
    with pytest.raises(ConfigError, match=r"u:\*\*\*@h:notaport") as refused:
        split_password("postgresql://u:secretpw@h:notaport/db")
    assert "secretpw" not in str(refused.value)


# -- local_cluster.sh: it deletes only what it made --------------------------------------------


def test_down_and_start_refuse_a_folder_the_script_did_not_make(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    for args in (("down", str(user)), ("stop", "postgres", str(user)), ("start", "mlflow", str(user))):
        out = script(*args)
        assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stderr.startswith(f"local_cluster: {user} was not made by")
    # a forged env file does not make it ours: the layout is checked too
    (user / "env").write_text("# written by fedbench's scripts/local_cluster.sh up\n")
    out = script("down", str(user))
    assert out.returncode != 0 and out.stderr == (f"local_cluster: {user} was not made by '{SCRIPT} up' (it holds notes.txt, "
                                                  "which up never writes): nothing stopped or deleted\n")
    assert (user / "notes.txt").read_text() == "keep me" and (user / "env").exists()
    assert script("down", str(tmp_path / "absent")).returncode == 0 and not (tmp_path / "absent").exists()


def fake_cluster(folder: Path) -> Path:
    """A folder laid out as `up` leaves it (its env's first line is the marker), with no process of its own."""
    folder.mkdir()
    marker = next(line for line in SCRIPT.read_text().splitlines() if line.startswith("MARKER="))
    (folder / "env").write_text(marker.split("=", 1)[1].strip('"') + "\n")
    return folder


def test_down_and_stop_signal_no_process_that_merely_reuses_a_recorded_pid(tmp_path):
    """After a crash the pids in the folder's pid files may be another program's: only the process the
    script started (its start time recorded beside the pid) is signalled."""
    folder = fake_cluster(tmp_path / "c")
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)  # a group leader, as start_bg's are
    try:
        for name in ("mlflow", "ray-head", "ray-worker"):
            (folder / f"{name}.pid").write_text(f"{stranger.pid}\n")
        (folder / "mlflow.started").write_text("1 " + Path("/proc/sys/kernel/random/boot_id").read_text())  # another start
        out = script("stop", "mlflow", str(folder))
        assert out.returncode == 0 and "not signalled" in out.stderr, out.stderr
        assert stranger.poll() is None and not (folder / "mlflow.pid").exists()
        out = script("down", str(folder))  # the ray pids: no start time recorded (a pre-fix folder)
        assert out.returncode == 0 and out.stderr.count("not signalled") == 2, out.stderr
        assert stranger.poll() is None and not folder.exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_up_refuses_a_folder_that_holds_anything(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    out = script("up", str(tmp_path))
    assert out.returncode != 0 and out.stderr.strip() == f"local_cluster: {tmp_path} is not empty: up takes a new " \
                                                          "or empty folder (down removes all of it)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def skip_where_usable(interpreter: str, module: str) -> None:
    """A refusal of `interpreter` needs one an unprivileged user cannot use: this one's out of its reach (under
    /root), another without `module`. Skip where this machine's is usable."""
    if interpreter == sys.executable and reachable_by_all(Path(interpreter)):
        pytest.skip(f"{interpreter} is within every user's reach here")
    if interpreter != sys.executable and (not Path(interpreter).exists() or subprocess.run(
            [interpreter, "-c", f"import {module}"], capture_output=True, check=False).returncode == 0):
        pytest.skip(f"{interpreter} is absent or has {module}")


def as_root(test):
    """Only root's `up` runs the MLflow server as another user (setpriv switches to it)."""
    import shutil

    return pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                              reason="what local_cluster.sh does when run as root")(test)


@as_root
@pytest.mark.parametrize(("interpreter", "why"), [
    (sys.executable, "Permission denied|No module named"),  # under /root, mode 700 (some kernels still exec it, with
    ("/usr/bin/python3", "No module named")])  # the system's libpython and none of its packages); no mlflow there
def test_up_as_root_refuses_a_server_interpreter_its_user_cannot_use_before_making_anything(tmp_path, interpreter, why):
    """As root the MLflow server runs as an unprivileged user: an interpreter that user cannot run, or
    that lacks mlflow or psycopg2, is one line naming it, the reason and the remedy, before anything
    is made or started. (`nobody` stands in for the server's user: no user is created.)"""
    import re
    import shutil

    skip_where_usable(interpreter, "mlflow")
    folder = tmp_path / "c"
    out = subprocess.run(["bash", str(SCRIPT), "up", str(folder)], capture_output=True, text=True, timeout=120,
                         env={**env(), "PYTHON": sys.executable, "FEDBENCH_CLUSTER_PYTHON": interpreter,
                              "FEDBENCH_MLFLOW_USER": "nobody", **RAY_AS_ROOT})
    try:
        assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-3000:]
        [line] = out.stderr.strip().splitlines()
        assert line.startswith("local_cluster: as root the MLflow server runs as the user nobody, which cannot use "
                               f"{interpreter}: ") and re.search(why, line), line
        assert line.endswith("make an interpreter it can with 'bash scripts/install_cluster_python.sh' (or set "
                             "FEDBENCH_CLUSTER_PYTHON): nothing started"), line
        assert not folder.exists()
    finally:
        if (folder / "env").exists():  # the script before the check started a whole cluster
            subprocess.run(["bash", str(SCRIPT), "down", str(folder)], env={**env(), "PYTHON": sys.executable},
                           capture_output=True, timeout=300)
        shutil.rmtree(folder, ignore_errors=True)


@as_root
def test_up_as_root_refuses_a_folder_its_unprivileged_parts_cannot_reach(tmp_path):
    """PostgreSQL and the MLflow server run as other users and write in DIR: a DIR under a folder
    closed to them (pytest's tmp folders are mode 700) is one line before anything starts."""
    import shutil

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    folder = closed / "c"
    try:
        out = script("up", str(folder))
        assert out.returncode == 1 and out.stderr.strip() == (
            f"local_cluster: the user postgres cannot reach {folder} (a folder above it is closed to other users), and "
            f"as root PostgreSQL runs as postgres and the MLflow server as {MLFLOW_USER}: take a folder they all can "
            "reach, such as the default /tmp/fedbench-cluster: nothing started"), out.stderr[-3000:]
        assert list(folder.iterdir()) == []
    finally:
        if (folder / "env").exists():
            script("down", str(folder))
        shutil.rmtree(closed, ignore_errors=True)


# -- local_cluster.sh's cluster (slow) ---------------------------------------------------------


@pytest.mark.slow
def test_every_part_of_the_cluster_listens_on_loopback_only(cluster):
    found = listening_sockets(process_groups(cluster.dir))
    commands = {command for _, _, _, command in found}
    # the parts that must be there: both raylets, the GCS, PostgreSQL, the MLflow server, an agent
    assert {"gcs_server", "raylet", "postgres"} <= commands and any(c.startswith("ray::Dashboard") for c in commands)
    assert sum(c == "raylet" for _, _, _, c in found) >= 4  # two nodes, node manager + object manager each
    exposed = [f"{command} (pid {pid}) on {address}:{port}" for address, port, pid, command in found if not is_loopback(address)]
    assert exposed == [], "listening beyond 127.0.0.1: " + "; ".join(exposed)


@pytest.mark.slow
def test_postgresql_asks_for_a_password_and_its_role_is_no_superuser(cluster):
    import psycopg2

    assert (cluster.dir / "env").stat().st_mode & 0o777 == 0o600
    dsn = cluster.postgres_uri.replace("postgresql+psycopg2://", "postgresql://")
    clean = {k: v for k, v in os.environ.items() if k not in ("PGPASSWORD", "PGPASSFILE")}
    probe = ("import sys, psycopg2\ntry:\n    psycopg2.connect(sys.argv[1])\nexcept psycopg2.OperationalError as e:\n"
             "    print(e); sys.exit(3)")
    for user_dsn in (dsn, dsn.replace("//fedbench@", "//fedbench_admin@")):
        out = subprocess.run([sys.executable, "-c", probe, user_dsn], env={**clean, "HOME": "/nonexistent"},
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 3 and "password" in out.stdout, out.stdout + out.stderr
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(dsn, password="wrong-password")
    [(superuser, createrole, createdb)] = cluster.sql(
        "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user")
    assert (superuser, createrole, createdb) == (False, False, False)
    assert cluster.sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'mlflow'") == [("fedbench",)]


def store_text(cluster) -> str:
    """Every row of every table of the MLflow database, as text."""
    tables = [t for (t,) in cluster.sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    return "\n".join(str(cluster.sql(f'SELECT * FROM "{t}"')) for t in tables)


@pytest.mark.slow
def test_a_password_in_tracking_uri_is_recorded_nowhere_and_resume_gets_it_from_the_environment(cluster, tmp_path):
    password = cluster.exported["PGPASSWORD"]
    uri = cluster.postgres_uri.replace("//fedbench@", f"//fedbench:{password}@")
    no_password = {k: v for k, v in env().items() if k not in ("PGPASSWORD", "PGPASSFILE", "FEDBENCH_TRACKING_PASSWORD")}
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "fedbench.cli", "run", *SMALL, "rounds=300", "tracking.checkpoint_every=5",
           "tracking.experiment=with_password", "tracking.artifacts=true", f"tracking.uri={uri}", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**no_password, "HOME": str(tmp_path)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (run_dir / "checkpoint.pt").exists(), 180, "the run's first checkpoint", proc)
        proc.send_signal(signal.SIGKILL)
    finally:
        printed = "".join(proc.communicate(timeout=60))
    recorded = cluster.sql("SELECT value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid JOIN experiments e ON "
                           "e.experiment_id = r.experiment_id WHERE e.name = 'with_password' AND t.key = 'overrides'")
    assert recorded and "tracking.uri=postgresql+psycopg2://fedbench@127.0.0.1" in recorded[0][0]
    # without the password anywhere, resume stops in one line that says where to give it
    refused = subprocess.run([sys.executable, "-m", "fedbench.cli", "resume", str(run_dir)], cwd=tmp_path,
                             env={**no_password, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and len(error_lines(refused.stderr)) == 1, refused.stderr[-3000:]
    assert "PGPASSWORD" in error_lines(refused.stderr)[0]
    # with it in libpq's own variable, it continues the same MLflow run to the end
    resumed = subprocess.run([sys.executable, "-m", "fedbench.cli", "resume", str(run_dir)], cwd=tmp_path,
                             env={**no_password, "HOME": str(tmp_path), "PGPASSWORD": password}, capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [run] = cluster.sql("SELECT r.status FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
                        "WHERE e.name = 'with_password'")
    assert run == ("FINISHED",)
    for where, text in (("the run's output", printed + refused.stdout + refused.stderr + resumed.stdout + resumed.stderr),
                        ("the MLflow database", store_text(cluster))):
        assert password not in text, where
    assert files_holding(tmp_path, password) == []  # run folder, .hydra/, logs, the artifacts under mlruns/


@pytest.mark.slow
def test_a_password_typed_for_an_mlflow_server_is_recorded_nowhere(cluster, tmp_path):
    uri = cluster.mlflow_uri.replace("http://", f"http://alice:{SECRET}@")  # the local server ignores it
    out = fedbench("run", *SMALL, "rounds=2", "tracking.artifacts=true", "tracking.experiment=server_password",
                   f"tracking.uri={uri}", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    [run] = cluster.runs("server_password")
    assert run.data.params["tracking.uri"] == cluster.mlflow_uri.replace("http://", "http://alice@")
    for where, text in (("the output", out.stdout + out.stderr), ("the MLflow database", store_text(cluster))):
        assert SECRET not in text, where
    assert files_holding(tmp_path, SECRET) == [] and files_holding(cluster.dir / "artifacts", SECRET) == []


@pytest.mark.slow
def test_no_ray_process_of_the_cluster_holds_the_database_password(cluster):
    """Ray's workers run users' code and record through the MLflow server: they need no PGPASSWORD."""
    password = cluster.exported["PGPASSWORD"]
    groups = {int((cluster.dir / f"{name}.pid").read_text()) for name in ("ray-head", "ray-worker")}
    ray_pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(int(p.name)) in groups]
    assert ray_pids
    holding = [pid for pid in ray_pids if password.encode() in _environ(pid)]
    assert holding == [], f"processes {holding} of Ray's groups hold PGPASSWORD"


@pytest.mark.slow
def test_every_ray_service_refuses_a_caller_without_the_cluster_token(cluster):
    """Ray's token authentication: the GCS, the client server, each node's raylet and agents answer
    a request without the token, or with another, by refusing it, and the same request with the
    token of DIR/ray.token (mode 600, the invoker's) normally."""
    token_file = cluster.dir / "ray.token"
    assert token_file.stat().st_mode & 0o777 == 0o600 and token_file.stat().st_uid == os.geteuid()
    assert cluster.exported["RAY_AUTH_MODE"] == "token" and cluster.exported["RAY_AUTH_TOKEN_PATH"] == str(token_file)
    endpoints = cluster.ray_endpoints()
    assert len(endpoints) == 2 + 3 * 2  # two nodes
    answers = {what: [ray_answer(protocol, port, token) for token in (None, "0" * 64, cluster.token())]
               for what, protocol, port in endpoints}
    refused = {"UNAUTHENTICATED", "HTTP 401", "HTTP 403"}
    wrong = {what: got for what, got in answers.items() if not (got[0] in refused and got[1] in refused and got[2] == "ok")}
    assert wrong == {}, f"(no token, another token, the token) answered: {wrong}"


DRIVER = """
import os, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
@ray.remote
def pid():
    return os.getpid()
print("a task ran in process", ray.get(pid.remote()))
"""


@pytest.mark.slow
def test_a_driver_without_the_token_is_refused_by_the_head_and_one_that_sourced_the_env_runs_tasks(cluster, tmp_path):
    """What a local process that does not hold DIR/ray.token gets: no connection, through the GCS
    address or the Ray client port; a shell that sourced DIR/env runs tasks."""
    client = f"ray://127.0.0.1:{cluster.exported['RAY_CLIENT_SERVER_PORT']}"
    with_token = {**env(), **cluster.exported, "HOME": str(tmp_path)}
    without = {k: v for k, v in with_token.items() if not k.startswith("RAY_AUTH_")}
    # (through ray:// with the token, Ray's client server now and then lost the session it started under
    # load, a zombie: the client server's answer to the token is checked by the test above instead)
    ran = subprocess.run([sys.executable, "-c", DRIVER, cluster.ray_address], env=with_token, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0 and "a task ran in process" in ran.stdout, ran.stdout + ran.stderr[-3000:]
    refused = {address: subprocess.Popen([sys.executable, "-c", DRIVER, address], env=without, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True) for address in (cluster.ray_address, client)}
    for address, proc in refused.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode != 0 and "a task ran" not in out, out[-3000:]
        assert "ConnectionError" in out, out[-3000:]
        if address == cluster.ray_address:  # the GCS says why
            assert "Unauthenticated" in out and "InvalidAuthToken" in out, out[-3000:]
    assert not (tmp_path / ".ray").exists()  # the refused drivers made no token of their own


@pytest.mark.slow
def test_the_ray_token_is_on_no_command_line_and_in_no_file_but_its_own(cluster):
    token = cluster.token()
    on_command_lines = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and token.encode() in _read(p / "cmdline")]
    assert on_command_lines == [], f"processes {on_command_lines} have the Ray token on their command line"
    files = [p for p in cluster.dir.rglob("*") if p.is_file() and not p.is_symlink() and p.name != "ray.token"
             and token.encode() in _read(p)]
    assert files == [], files  # DIR/env names the file, Ray's logs and session files do not echo it
    assert b"RAY_AUTH_TOKEN_PATH=" + str(cluster.dir / "ray.token").encode() in _environ(
        int((cluster.dir / "ray-head.pid").read_text()))
    assert (cluster.dir / "ray").stat().st_mode & 0o777 == 0o700  # Ray's own folder in it is mode 777


NO_RAY_USER = ("as root, Ray's nodes run as the user whose jobs they run (a job sent to a node runs with its rights): "
               "name it with FEDBENCH_RAY_USER=USER (sudo's SUDO_USER is taken by default), or FEDBENCH_RAY_USER=root "
               "to run them as root")


@as_root
@pytest.mark.parametrize(("settings", "why"), [
    ({}, NO_RAY_USER),
    ({"SUDO_USER": "root"}, NO_RAY_USER),  # sudo from a root shell names no other user
    ({"FEDBENCH_RAY_USER": "no-such-user-fb"}, "FEDBENCH_RAY_USER=no-such-user-fb: no such user"),
    ({"FEDBENCH_RAY_USER": "nobody", "FEDBENCH_RAY_PYTHON": "/usr/bin/python3"},
     "Ray's nodes run as the user nobody, which cannot use /usr/bin/python3: it has no ray - set FEDBENCH_RAY_PYTHON to "
     "an interpreter nobody can run with ray {ray}, fedbench and torch"),
    ({"FEDBENCH_RAY_USER": "nobody", "FEDBENCH_RAY_PYTHON": sys.executable},
     "Ray's nodes run as the user nobody, which cannot use {python}: <why> - set FEDBENCH_RAY_PYTHON to "
     "an interpreter nobody can run with ray {ray}, fedbench and torch")],
    ids=["none", "sudo-from-root", "unknown", "no-ray", "out-of-reach"])
def test_up_as_root_runs_ray_as_a_user_it_names_and_checks_before_making_anything(tmp_path, settings, why):
    """A Ray node runs whatever job a driver sends it, with its user's rights: as root, `up` runs the
    nodes as the user named (FEDBENCH_RAY_USER, else sudo's SUDO_USER), root only when named; no
    such user, or an interpreter that user cannot run with the driver's Ray, is one line before
    anything is made or started."""
    import importlib.metadata
    import re

    if "FEDBENCH_RAY_PYTHON" in settings:
        skip_where_usable(settings["FEDBENCH_RAY_PYTHON"], "ray")
    folder = tmp_path / "c"
    base = {k: v for k, v in env().items() if k not in ("FEDBENCH_RAY_USER", "FEDBENCH_RAY_PYTHON", "SUDO_USER")}
    out = subprocess.run(["bash", str(SCRIPT), "up", str(folder)], capture_output=True, text=True, timeout=120,
                         env={**base, "PYTHON": sys.executable, **settings})
    try:
        assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-3000:]
        # under /root, mode 700: refused, or (some kernels still exec it) run without its packages
        pattern = re.escape(why.format(ray=importlib.metadata.version("ray"), python=sys.executable)).replace(
            re.escape("<why>"), "(.*Permission denied|it has no ray)")
        assert re.fullmatch(f"local_cluster: {pattern}: nothing started", out.stderr.strip()), out.stderr
        assert not folder.exists()
    finally:
        if (folder / "env").exists():  # a script that did not check started a whole cluster
            script("down", str(folder))


@pytest.mark.slow
@as_root
def test_as_root_the_mlflow_server_runs_as_its_own_unprivileged_user(cluster):
    """Any local user reaches the MLflow server's HTTP API (artifacts upload included): as root, every
    process of it runs as MLFLOW_USER, with no secret but the database's, and only the artifact
    folder is that user's."""
    import pwd

    user = pwd.getpwnam(MLFLOW_USER)
    assert user.pw_uid != 0 and user.pw_shell.endswith("nologin")
    group = int((cluster.dir / "mlflow.pid").read_text())
    server = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(int(p.name)) == group]
    port = int(cluster.exported["MLFLOW_PORT"])
    listeners = [pid for address, listen_port, pid, _ in listening_sockets(set(server)) if listen_port == port]
    assert listeners and set(listeners) <= set(server), (listeners, server)
    owners = {pid: _uid(pid) for pid in server}
    assert set(owners.values()) == {(user.pw_uid,) * 4}, f"the MLflow server's processes run as {owners}"
    for pid in server:
        environ = dict(item.split(b"=", 1) for item in _environ(pid).split(b"\0") if b"=" in item)
        assert environ.get(b"PGPASSWORD") == cluster.exported["PGPASSWORD"].encode()  # its database's
        assert not {b"RAY_AUTH_TOKEN_PATH", b"PYTHONPATH", b"FEDBENCH_POSTGRES_URI"} & set(environ), sorted(environ)
    assert (cluster.dir / "artifacts").stat().st_uid == user.pw_uid
    assert {p.name for p in cluster.dir.iterdir() if p.stat().st_uid == user.pw_uid} == {"artifacts"}
    for secret in ("env", "ray.token"):
        assert (cluster.dir / secret).stat().st_mode & 0o077 == 0  # out of the server's reach


@pytest.mark.slow
@as_root
def test_as_root_ray_runs_as_the_user_named_with_none_of_roots_environment(tmp_path):
    """Ray's nodes as FEDBENCH_RAY_USER (`nobody` here, from install_cluster_python.sh's Ray: this
    machine's fedbench and torch are under /root): every process of both nodes and the tasks run as
    that user, none holds root's secrets (the database's, or any other of root's environment), Ray's
    folder, token and DIR/env are that user's while PostgreSQL's superuser password stays root's, and
    a node started again runs as the user `up` chose."""
    import importlib.metadata
    import pwd
    import re
    import shutil
    import tempfile

    from tests.clusterkit import exported
    from tests.conftest import require_data

    probe = subprocess.run([CLUSTER_PYTHON, "-c", "import importlib.metadata as m, platform; "
                            "print(m.version('ray'), platform.python_version())"], capture_output=True, text=True)
    require_data(probe.returncode == 0 and probe.stdout.split()[0] == importlib.metadata.version("ray"),
                 f"{CLUSTER_PYTHON} has not the driver's Ray (bash scripts/install_cluster_python.sh)")
    nobody = pwd.getpwnam("nobody")
    level = {} if probe.stdout.split()[1] == ".".join(map(str, sys.version_info[:3])) else {
        "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor"}  # Debian's 3.11.2 beside the driver's 3.11.x
    root_secret = "roots-own-" + os.urandom(8).hex()
    folder = Path(tempfile.mkdtemp(prefix="fbr", dir="/tmp")) / "c"  # short: Ray's socket paths
    folder.parent.chmod(0o755)  # as root, the unprivileged parts must reach the folder
    as_nobody = {"FEDBENCH_RAY_USER": "nobody", "FEDBENCH_RAY_PYTHON": CLUSTER_PYTHON, **level}

    def ray_pids() -> dict[int, tuple[int, ...]]:
        groups = {int((folder / f"{name}.pid").read_text()) for name in ("ray-head", "ray-worker")}
        return {int(p.name): _uid(int(p.name)) for p in Path("/proc").iterdir()
                if p.name.isdigit() and _pgid(int(p.name)) in groups}

    try:
        up = subprocess.run(["bash", str(SCRIPT), "up", str(folder)], capture_output=True, text=True, timeout=600,
                            env={**env(), "PYTHON": sys.executable, "FEDBENCH_ROOTS_OWN_SECRET": root_secret, **as_nobody})
        assert up.returncode == 0, up.stderr[-3000:]
        assert "with one worker node, run by nobody" in up.stdout
        assert re.fullmatch(re.escape(f"local_cluster: warning: {CLUSTER_PYTHON}, run by nobody, lacks ") +
                            "(fedbench )?torch" +  # fedbench: through the checkout's PYTHONPATH, where nobody reads it
                            re.escape(": Ray's nodes run tasks, but no fedbench job (FEDBENCH_RAY_PYTHON: an interpreter "
                                      "with fedbench and torch)"), up.stderr.strip()), up.stderr[-3000:]
        cluster = exported(folder / "env")
        processes = ray_pids()
        assert len(processes) >= 4 and set(processes.values()) == {(nobody.pw_uid,) * 4}, processes
        for pid in processes:
            environ = _environ(pid)
            assert root_secret.encode() not in environ and cluster["PGPASSWORD"].encode() not in environ, pid
        for name, mode in (("ray", 0o700), ("ray.token", 0o600), ("env", 0o600)):
            info = (folder / name).stat()
            assert (info.st_uid, info.st_mode & 0o777) == (nobody.pw_uid, mode), name
        admin = (folder / "pg.admin").stat()
        assert (admin.st_uid, admin.st_mode & 0o777) == (0, 0o600)
        assert "PG_ADMIN_PASSWORD=" in (folder / "pg.admin").read_text()
        assert "PG_ADMIN" not in (folder / "env").read_text()
        task = ("import os, sys, ray\nray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                "@ray.remote\ndef who():\n    return os.geteuid(), sorted(os.environ)\n"
                "print('task', *ray.get(who.remote()))")
        ran = subprocess.run([sys.executable, "-c", task, cluster["RAY_ADDRESS"]], capture_output=True, text=True,
                             timeout=300, env={**env(), **cluster, "HOME": str(tmp_path)})
        assert ran.returncode == 0, ran.stderr[-3000:]
        [line] = [line for line in ran.stdout.splitlines() if line.startswith("task ")]
        assert line.startswith(f"task {nobody.pw_uid} ") and "FEDBENCH_ROOTS_OWN_SECRET" not in line, line
        # a node started again is `up`'s choice, whatever this shell says
        for command in ("stop", "start"):
            again = subprocess.run(["bash", str(SCRIPT), command, "worker", str(folder)], capture_output=True, text=True,
                                   timeout=600, env={**env(), "PYTHON": sys.executable, **RAY_AS_ROOT})
            assert again.returncode == 0, again.stderr[-3000:]
        assert set(ray_pids().values()) == {(nobody.pw_uid,) * 4}
    finally:
        if (folder / "env").exists():
            down = script("down", str(folder))
            assert down.returncode == 0 and not folder.exists(), down.stderr[-3000:]
        shutil.rmtree(folder.parent, ignore_errors=True)


@pytest.mark.slow
@as_root
def test_up_by_an_unprivileged_user_runs_every_part_as_that_user(tmp_path):
    """What a user without root gets (the tests otherwise run as root): `up` as `nobody`, from
    install_cluster_python.sh's interpreter, runs PostgreSQL, the MLflow server and both Ray nodes as
    `nobody`; naming another user for Ray is one line, nothing started; `down` removes it all."""
    import pwd
    import shutil
    import tempfile

    from tests.clusterkit import exported
    from tests.conftest import require_data

    require_data(subprocess.run([CLUSTER_PYTHON, "-c", "import ray, mlflow, psycopg2"], capture_output=True).returncode == 0,
                 f"{CLUSTER_PYTHON} lacks ray, mlflow or psycopg2 (bash scripts/install_cluster_python.sh)")
    nobody = pwd.getpwnam("nobody")
    folder = Path(tempfile.mkdtemp(prefix="fbn", dir="/tmp"))
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)

    def as_nobody(*args: str, **settings: str) -> subprocess.CompletedProcess:
        return subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--init-groups",
                               "env", "-i", f"PATH={Path(CLUSTER_PYTHON).parent}:/usr/bin:/bin", "HOME=/nonexistent",
                               f"PYTHON={CLUSTER_PYTHON}", *(f"{k}={v}" for k, v in settings.items()),
                               "bash", str(SCRIPT), *args], cwd="/", capture_output=True, text=True, timeout=600)

    try:
        refused = as_nobody("up", str(folder / "other"), FEDBENCH_RAY_USER="root")
        assert refused.returncode == 1 and refused.stderr.strip() == (
            "local_cluster: FEDBENCH_RAY_USER=root: only root's up runs Ray as another user (this is nobody): nothing "
            "started"), refused.stderr
        assert not (folder / "other").exists()
        up = as_nobody("up", str(folder / "c"))
        assert up.returncode == 0 and "with one worker node, run by nobody" in up.stdout, up.stderr[-3000:]
        pids = process_groups(folder / "c")
        assert len(pids) >= 6 and {_uid(pid) for pid in pids} == {(nobody.pw_uid,) * 4}, {pid: _uid(pid) for pid in pids}
        assert exported(folder / "c" / "env")["RAY_AUTH_MODE"] == "token"
        down = as_nobody("down", str(folder / "c"))
        assert down.returncode == 0 and not (folder / "c").exists(), down.stderr[-3000:]
    finally:
        if (folder / "c" / "env").exists():
            as_nobody("down", str(folder / "c"))
        shutil.rmtree(folder, ignore_errors=True)


def _uid(pid: int) -> tuple[int, ...]:
    """The process's real, effective, saved and file-system user ids."""
    for line in _read(Path(f"/proc/{pid}/status")).decode().splitlines():
        if line.startswith("Uid:"):
            return tuple(int(uid) for uid in line.split()[1:])
    return ()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
def test_up_and_down_in_a_folder_whose_name_holds_a_space(tmp_path):
    """pg_ctl -o split its options on a space; a failed up deleted the log it pointed to."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="fb c ", dir="/tmp")) / "my cluster"  # short: Ray's socket paths
    folder.parent.chmod(0o755)  # as root, the postgres user must reach the folder
    try:
        up = script("up", str(folder))
        assert up.returncode == 0, up.stderr[-3000:]
        assert (folder / "pg" / "postmaster.pid").is_file() and (folder / "ray-head.started").is_file()
        down = script("down", str(folder))
        assert down.returncode == 0 and not folder.exists(), down.stderr
    finally:
        if folder.exists():
            script("down", str(folder))
        shutil.rmtree(folder.parent, ignore_errors=True)


# -- a full disk under a disk client table (issue 42, section 5) ------------------------------


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs (root only: mount(8)); skipped where it cannot be made."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_full_disk_under_a_disk_client_table_is_one_line_failed_and_keeps_the_checkpoint(tmp_path, tiny_disk):
    """The table's memory-mapped rows on a file system that fills up: was a SIGBUS, no message, the
    MLflow run RUNNING; now one line, FAILED, the last checkpoint kept, and resume completes the run."""
    from tests.faultkit import runs

    db, run_dir = tmp_path / "m.db", tiny_disk / "run"
    args = ["dataset=synthetic", "dataset.generator=per_user", "dataset.num_users=5000", "dataset.eval_users=20",
            "partition=natural", "num_clients=5000", "clients_per_round=10", "algorithm=scaffold",
            "engine.client_state_device=disk", "local_steps=2", "local_epochs=null", "engine.threads=1",
            "tracking.artifacts=false", "rounds=60", "tracking.checkpoint_every=3", f"tracking.uri=sqlite:///{db}",
            f"hydra.run.dir={run_dir}"]
    out = fedbench("run", *args, cwd=tmp_path, timeout=600)
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    [line] = error_lines(out.stderr)
    assert "no space left" in line and "client_state" in line and "is kept" in line, line
    _, [run] = runs(db)
    assert run.info.status == "FAILED"
    assert (run_dir / "checkpoint.pt").is_file()
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_disk)], check=True)  # space freed
    resumed = fedbench("resume", str(run_dir), cwd=tmp_path, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    _, [run] = runs(db)
    assert run.info.status == "FINISHED"
