"""What a reader of the record (`fedbench report`, `fedbench plot`) does to a store and what it
writes (issue 42, sections 3 and 5): it opens only an existing MLflow store and writes nothing into
it, reaches a server at once or says so in one line, waits for a locked store saying what it waits
for and gives up in one line after a bounded time, and writes no password into a page or a file."""

from __future__ import annotations

import sys
import time

import pytest

from tests.faultkit import error_lines, fedbench
from tests.tracking.test_report import cli, store  # noqa: F401  (the module's MLflow store fixture)

SECRET = "Hunter2-s3cret#pw/x"


def test_an_empty_file_given_to_a_reader_stays_empty_and_is_refused_in_one_line(tmp_path):
    empty = tmp_path / "e.db"
    empty.touch()
    out = fedbench("report", "--uri", f"sqlite:///{empty}", cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert "not an MLflow store" in out.stderr and str(empty) in out.stderr
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["e.db"]  # no lock file either


def test_a_fifo_as_the_sqlite_store_is_named_before_the_run_opens_it(tmp_path):
    """SQLite opened a FIFO given as tracking.uri and the run blocked on it forever (no output)."""
    import os

    from fedbench.core.errors import ConfigError
    from fedbench.tracking.store import open_store

    fifo = tmp_path / "m.db"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=f"{fifo} is a FIFO, not an MLflow store .*remove it or give another"):
        open_store(f"sqlite:///{fifo}", "fedbench")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]  # no lock file beside it either


def test_a_reader_leaves_an_existing_store_as_it_was(store, tmp_path):  # noqa: F811
    uri, folder = store
    before = sorted(p.name for p in folder.iterdir())
    out = cli("report", "--uri", uri)
    assert out.exit_code == 0, out.output
    assert sorted(p.name for p in folder.iterdir()) == before  # no m.db.lock made by a reader


def test_a_refused_server_is_one_line_at_once(tmp_path):
    start = time.monotonic()
    out = fedbench("report", "--uri", "http://127.0.0.1:9", cwd=tmp_path, timeout=200)
    took = time.monotonic() - start
    assert out.returncode != 0 and error_lines(out.stderr) == [line for line in out.stderr.splitlines() if line], out.stderr
    assert len(error_lines(out.stderr)) == 1 and "127.0.0.1:9" in out.stderr and took < 30, (took, out.stderr)


@pytest.fixture
def refusing_database():
    """A PostgreSQL port on 127.0.0.1 that takes the connection and closes it, as a server refusing the login."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))

    def refuse():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed by the fixture
                return
            conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    yield f"postgresql+psycopg2://fedbench@127.0.0.1:{listener.getsockname()[1]}/mlflow"
    listener.close()


@pytest.mark.parametrize("command", ["run", "report"])
def test_a_database_that_refuses_the_login_is_one_line_at_once(refusing_database, command, tmp_path, monkeypatch):
    """MLflow retries a failed database connection 10 times with backoff: a run whose store refused its
    login (a resume without the password) was silent for 101 s before its one line."""
    for name in ("FEDBENCH_TRACKING_PASSWORD", "PGPASSWORD", "PGPASSFILE"):  # none given: the line says where
        monkeypatch.delenv(name, raising=False)
    args = ("report", "--uri", refusing_database) if command == "report" else (
        "run", "rounds=1", f"tracking.uri={refusing_database}", f"hydra.run.dir={tmp_path}/run")
    start = time.monotonic()
    out = fedbench(*args, cwd=tmp_path, timeout=300)
    took = time.monotonic() - start
    assert out.returncode != 0 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert refusing_database.partition("://")[2] in out.stderr and "PGPASSWORD" in out.stderr, out.stderr
    assert took < 30, (took, out.stderr)


def test_a_database_driver_that_is_not_installed_is_one_line_naming_the_one_that_is(refusing_database, tmp_path):
    """SQLAlchemy 2.1 reads postgresql:// as psycopg 3's URI; the `postgres` extra installs psycopg2."""
    missing = refusing_database.replace("+psycopg2", "+no_such_driver")
    out = fedbench("run", "rounds=1", f"tracking.uri={missing}", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode != 0 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert "no_such_driver" in out.stderr and "postgresql+psycopg2://" in out.stderr, out.stderr


def test_a_reader_waiting_on_a_locked_store_says_so_and_gives_up_in_one_line(store, tmp_path, monkeypatch):  # noqa: F811
    from filelock import FileLock

    uri, folder = store
    monkeypatch.setenv("FEDBENCH_STORE_WAIT", "2")
    lock = FileLock(str(folder / "m.db.lock"))  # as a run creating or migrating the store holds it
    with lock:
        start = time.monotonic()
        out = fedbench("report", "--uri", uri, cwd=tmp_path, timeout=120)
        took = time.monotonic() - start
    (folder / "m.db.lock").unlink()
    assert out.returncode != 0 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert out.stderr.startswith("waiting for ") and "m.db.lock" in out.stderr.splitlines()[0]
    assert "gave up after 2 s" in error_lines(out.stderr)[0] and took < 60


def test_no_password_of_the_command_line_or_environment_is_written_into_the_page(store, tmp_path, monkeypatch):  # noqa: F811
    uri, _ = store
    fmt = "html"
    page = tmp_path / f"report.{fmt}"
    typed = f"postgresql+psycopg2://alice:{SECRET}@db.example:5432/mlflow"  # as a user typed it
    args = ["report", "--uri", uri, "--format", fmt, "--output", str(page)]
    monkeypatch.setattr(sys, "argv", ["fedbench", *args, "--experiment", "fedbench", f"--filter=params.x = '{typed}'"])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "Tr0ub4dor-env")
    monkeypatch.setattr("fedbench.tracking.report.shared_heading", lambda frame: "Tr0ub4dor-env")  # a value shown
    out = cli(*args)
    assert out.exit_code == 0, out.output
    text = page.read_text()
    assert SECRET not in text and "Tr0ub4dor-env" not in text
    assert "alice:***@db.example" in text  # the provenance still shows the command


def with_a_recursive_view(store, tmp_path):  # noqa: F811
    """A copy of the store whose latest_metrics is a recursive view (a read of it never ends)."""
    import shutil
    import sqlite3

    _, folder = store
    crafted = tmp_path / "shared.db"
    shutil.copy(folder / "m.db", crafted)
    con = sqlite3.connect(crafted)
    con.executescript("ALTER TABLE latest_metrics RENAME TO kept; CREATE VIEW latest_metrics AS WITH RECURSIVE "
                      "c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT k.key, k.value, k.timestamp, k.step, "
                      "k.is_nan, k.run_uuid FROM kept k, c")
    con.close()
    return crafted


def test_a_store_that_defines_what_a_read_runs_is_refused_in_one_line(store, tmp_path):  # noqa: F811
    """A recursive view in place of MLflow's table: `report` read it forever, and SIGTERM did not stop it."""
    crafted = with_a_recursive_view(store, tmp_path)
    before = crafted.read_bytes()
    out = fedbench("report", "--uri", f"sqlite:///{crafted}", cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert f"{crafted} is not an MLflow store as MLflow writes one: it defines the view latest_metrics" in out.stderr
    assert crafted.read_bytes() == before


def test_a_store_with_a_generated_column_is_refused_in_one_line(store, tmp_path):  # noqa: F811
    """A generated column computes on every read: one that builds a string of hundreds of MB in a 1.4 MB store
    made `fedbench report` take 26 s and 3.7 GB (here a cheap one: its presence is refused)."""
    import shutil
    import sqlite3

    _, folder = store
    crafted = tmp_path / "shared.db"
    shutil.copy(folder / "m.db", crafted)
    con = sqlite3.connect(crafted)
    con.execute("ALTER TABLE params ADD COLUMN padded TEXT GENERATED ALWAYS AS (value || 'x') VIRTUAL")
    con.commit()
    con.close()
    before = crafted.read_bytes()
    out = fedbench("report", "--uri", f"sqlite:///{crafted}", cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert f"{crafted} is not an MLflow store as MLflow writes one: it defines the generated column params.padded" \
        in out.stderr
    assert crafted.read_bytes() == before


def test_a_run_into_a_store_that_defines_a_view_is_refused_before_it_starts(store, tmp_path):  # noqa: F811
    """The run's own store, given as tracking.uri: the run hung before its first line, deaf to SIGTERM."""
    from tests.faultkit import SMALL

    crafted = with_a_recursive_view(store, tmp_path)
    out = fedbench("run", *SMALL, "rounds=1", f"tracking.uri=sqlite:///{crafted}", f"hydra.run.dir={tmp_path}/run",
                   cwd=tmp_path, timeout=90)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert f"{crafted} is not an MLflow store as MLflow writes one: it defines the view latest_metrics" in out.stderr
    assert not (tmp_path / "run").exists()


def test_a_run_into_a_store_with_a_trigger_of_its_own_is_refused_and_mlflows_is_not(store, tmp_path):  # noqa: F811
    """A trigger runs on a write: one on `metrics` counting a cross join held a run at its first round, deaf to
    SIGTERM (killed at last by SIGKILL). MLflow's own trigger, which only refuses a change, is no reason to refuse."""
    import shutil
    import sqlite3

    from fedbench.tracking.store import store_code
    from tests.faultkit import SMALL

    _, folder = store
    crafted = tmp_path / "shared.db"
    shutil.copy(folder / "m.db", crafted)
    with sqlite3.connect(folder / "m.db") as con:
        assert store_code(con) == ""  # MLflow's schema, its trigger included
    con = sqlite3.connect(crafted)
    con.execute("CREATE TRIGGER slow AFTER INSERT ON metrics BEGIN SELECT count(*) FROM metrics a, metrics b, metrics c; END")
    con.commit()
    con.close()
    out = fedbench("run", *SMALL, "rounds=1", f"tracking.uri=sqlite:///{crafted}", f"hydra.run.dir={tmp_path}/run",
                   cwd=tmp_path, timeout=90)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert f"{crafted} is not an MLflow store as MLflow writes one: it defines the trigger slow" in out.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("version", ["ffffffffffff", "older"])
def test_a_store_of_a_schema_this_mlflow_does_not_know_is_not_sent_to_mlflow_db_upgrade(store, tmp_path, version):  # noqa: F811
    """MLflow calls every schema but its own "out-of-date" and says to run `mlflow db upgrade`: for a store a newer
    MLflow made (a colleague's), which this MLflow cannot migrate, the line says what it is; for an older store
    MLflow's advice stands. Either way the file is left as it was."""
    import os
    import shutil
    import sqlite3

    import mlflow.store.db_migrations as migrations
    from alembic.script import ScriptDirectory

    uri, folder = store
    crafted = tmp_path / "shared.db"
    shutil.copy(folder / "m.db", crafted)
    if version == "older":  # the revision before this MLflow's newest
        version = ScriptDirectory(os.path.dirname(migrations.__file__)).get_current_head()
        version = ScriptDirectory(os.path.dirname(migrations.__file__)).get_revision(version).down_revision
    with sqlite3.connect(crafted) as con:
        con.execute("UPDATE alembic_version SET version_num = ?", (version,))
    con.close()
    before = crafted.read_bytes()
    out = fedbench("report", "--uri", f"sqlite:///{crafted}", cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    if version == "ffffffffffff":
        assert f"its schema (version {version}) is none of MLflow " in out.stderr, out.stderr
        assert "a newer MLflow made it, and this one can neither read nor migrate it" in out.stderr
        assert "mlflow db upgrade" not in out.stderr
    else:
        assert f"found version {version}" in out.stderr and "mlflow db upgrade" in out.stderr, out.stderr
    assert crafted.read_bytes() == before
