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

from tests.clusterkit import SCRIPT, is_loopback, listening_sockets, process_groups, wait_until
from tests.faultkit import SMALL, env, error_lines, fedbench

SECRET = "Hunter2-s3cret-pw"


def script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env={**env(), "PYTHON": sys.executable}, capture_output=True,
                          text=True, timeout=120)


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
    assert out.returncode != 0 and "it holds notes.txt" in out.stderr
    assert (user / "notes.txt").read_text() == "keep me" and (user / "env").exists()
    assert script("down", str(tmp_path / "absent")).returncode == 0 and not (tmp_path / "absent").exists()


def test_up_refuses_a_folder_that_holds_anything(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    out = script("up", str(tmp_path))
    assert out.returncode != 0 and out.stderr.strip() == f"local_cluster: {tmp_path} is not empty: up takes a new " \
                                                          "or empty folder (down removes all of it)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


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
