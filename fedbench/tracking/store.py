"""Where runs are recorded: the embedded local MLflow store under outputs/, or a server."""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from pathlib import Path

from fedbench.core.errors import FedbenchError

DEFAULT_OUTPUTS = Path("outputs")


class StoreError(FedbenchError):
    """The tracking store failed while a run was being recorded (full disk, dead server)."""

    exit_code = 1


class StoreUnreachableError(FedbenchError):
    """The tracking store cannot be reached or used as a run starts: nothing was trained (exit 1, as a store
    that fails later: the config is not at fault)."""

    exit_code = 1
    before_work = True


def one_line(exc: BaseException) -> str:
    """An exception as one short line (sqlalchemy and MLflow errors carry SQL and URLs on many lines)."""
    text = " ".join(str(exc).split())
    for noise in (" [SQL:", " (Background on this error"):  # sqlalchemy's statement and help link
        text = text.split(noise)[0]
    return f"{exc.__class__.__name__}: {unknown_schema(text) or text[:300]}"


def unknown_schema(text: str) -> str | None:
    """MLflow calls every schema but its own "out-of-date" and says to migrate it (`mlflow db upgrade`): wrong
    advice for a store a newer MLflow made (shared by a colleague), which this one cannot migrate, and which an
    upgrade by the newer MLflow's owner would change under them. Said as it is where the schema's version is not
    one of this MLflow's migrations; None otherwise (an older store: MLflow's advice stands)."""
    import re

    found = re.search(r"found version (\w+), but expected (\w+)", text)
    if found is None:
        return None
    import mlflow
    import mlflow.store.db_migrations as migrations
    from alembic.script import ScriptDirectory

    known = {r.revision for r in ScriptDirectory(os.path.dirname(migrations.__file__)).walk_revisions()}
    if found.group(1) in known:
        return None
    return (f"its schema (version {found.group(1)}) is none of MLflow {mlflow.__version__}'s (whose newest is "
            f"{found.group(2)}): a newer MLflow made it, and this one can neither read nor migrate it; read it where "
            "that MLflow is installed, or upgrade MLflow here")


def quiet_libraries() -> None:
    """Import MLflow and keep its start-up and store logging quiet."""
    import logging

    import mlflow  # noqa: F401  (configures its loggers on import: silence them afterwards)

    for name in ("mlflow", "alembic", "matplotlib", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # a failing store (full disk) is reported in one line of ours; MLflow would add its own traceback
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def default_tracking_uri(outputs: Path = DEFAULT_OUTPUTS) -> str:
    """A SQLite store (MLflow's file store is in maintenance mode and refuses new stores)."""
    try:
        outputs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FedbenchError(f"cannot create the local MLflow store in {outputs.resolve()}: {exc.strerror or exc}; "
                            "run from a writable folder or set tracking.uri") from None
    check_store_link(outputs / "mlflow.db")  # before the link is resolved away
    return f"sqlite:///{(outputs / 'mlflow.db').resolve()}"


def default_artifact_root(outputs: Path = DEFAULT_OUTPUTS) -> str:
    return (outputs / "mlartifacts").resolve().as_uri()


def resolve_tracking_uri(uri: str | None) -> str:
    """The store's URI as fedbench shows and records it: any password is withheld (core.secrets)
    and put back only by `client_for`."""
    from fedbench.core.secrets import withhold_uri

    return withhold_uri(uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri())


def client_for(uri: str):
    """MLflow's client on the store `uri`, with its withheld password (the one place it is used)."""
    from mlflow.tracking import MlflowClient

    from fedbench.core.secrets import reveal

    return MlflowClient(reveal(uri))


DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}


def existing_store(uri: str | None, option: str = "--uri") -> str:
    """The store a reader (report, plot) opens: one that exists. MLflow would create an empty one at a
    mistyped path (and the default one under outputs/ in whatever folder the command runs in)."""
    from fedbench.core.errors import ConfigError

    from fedbench.core.secrets import withhold_uri

    store = uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(DEFAULT_OUTPUTS / 'mlflow.db').resolve()}"
    store = withhold_uri(store)  # its password known to the redaction, put back by client_for only
    if store.startswith(("http://", "https://", "databricks", "postgresql", "mysql", "mssql")):
        return store  # a server or a database: reaching it is the check
    path = Path(store.removeprefix("sqlite:///").removeprefix("file://"))
    if store.startswith("sqlite:///"):
        sqlite_file(path, store)
    if store.startswith("sqlite:///") and not path.is_file() or not store.startswith("sqlite:") and not path.exists():
        where = option if uri else "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else None
        fix = f"check {where}" if where else f"run it from the folder fedbench run wrote outputs/ in, or give {option}"
        raise ConfigError(f"no MLflow store at {path} ({store}); {fix} (a reader never creates a store)")
    return store


WAIT_ENV = "FEDBENCH_STORE_WAIT"  # seconds a reader waits for a store another process holds locked
MLFLOW_TABLES = {"experiments", "runs", "alembic_version"}


def store_wait() -> float:
    from fedbench.core.errors import ConfigError

    raw = os.environ.get(WAIT_ENV, "60")
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not 0 <= wait < float("inf"):
        raise ConfigError(f"{WAIT_ENV}={raw!r}: not a number of seconds (a reader's wait for a locked store; default 60)")
    return wait


def reader_client(uri: str | None, option: str = "--uri"):
    """The MlflowClient of a reader (report, plot): on a store that exists and is an MLflow store, a
    server reached at once (probe_server), and nothing written: no store created or migrated, no lock
    file made. A store another process holds locked is waited for, saying so, at most store_wait() s."""
    store = existing_store(uri, option)
    if not store.startswith("sqlite:///"):
        probe_server(store)
        return client_for(store)
    wait = store_wait()
    db = Path(store.removeprefix("sqlite:///"))
    with shared_lock(Path(str(db) + ".lock"), db, wait):
        check_mlflow_sqlite(db, wait)
        return client_for(store)


def _waiting(what: str, wait: float, deadline: float, said: bool) -> bool:
    """Say once what a reader waits for; give up in one line at the deadline."""
    import sys
    import time

    if time.monotonic() >= deadline:
        raise FedbenchError(f"gave up after {wait:g} s waiting for {what} (set {WAIT_ENV} to wait longer)")
    if not said:
        print(f"waiting for {what} (at most {wait:g} s; {WAIT_ENV} sets it)", file=sys.stderr, flush=True)
    time.sleep(0.2)
    return True


@contextmanager
def shared_lock(lock: Path, db: Path, wait: float):
    """A shared hold on store_lock's file while a reader opens the store, so no creator or migration
    runs meanwhile; the file is opened read-only and never created (no lock file: none to wait for)."""
    import fcntl
    import stat
    import time

    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            deadline, said = time.monotonic() + wait, False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    said = _waiting(f"{lock}: another fedbench process is creating or migrating the MLflow store {db}",
                                    wait, deadline, said)
        yield
    finally:
        os.close(fd)  # releases the hold


def check_mlflow_sqlite(db: Path, wait: float) -> None:
    """`db` is an MLflow store: read-only, MLflow's tables are there (MLflow would turn any other
    SQLite file, an empty one included, into a new store), and reading it runs nothing the file defines
    (store_code)."""
    import sqlite3
    import time

    from fedbench.core.errors import ConfigError

    deadline, said = time.monotonic() + wait, False
    while True:
        try:
            con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=0.5)
            try:
                tables = sqlite_tables(con)
                code = store_code(con)
            finally:
                con.close()
            break
        except sqlite3.DatabaseError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise ConfigError(f"{db} is not an MLflow store (not an SQLite database: {exc}); a reader never "
                                  "writes one: give the mlflow.db that fedbench run wrote") from None
            said = _waiting(f"the MLflow store {db}: another process holds it locked", wait, deadline, said)
    if not MLFLOW_TABLES <= tables:
        raise ConfigError(f"{db} is not an MLflow store (it has no {', '.join(sorted(MLFLOW_TABLES - tables))} "
                          "table); a reader never writes one: give the mlflow.db that fedbench run wrote")
    if code:  # sqlite_file's check, made again once the store is not held locked
        raise code_in_store(db, code)


def sqlite_tables(con) -> set[str]:
    return {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def store_code(con) -> str:
    """What in an SQLite file runs when it is read ('' for none): a view (a recursive one in place of MLflow's
    `latest_metrics` held `fedbench report` forever, deaf to SIGTERM). MLflow's schema has only tables, indexes
    and a trigger, which runs on a write, and a reader never writes."""
    view = con.execute("SELECT name FROM sqlite_master WHERE type = 'view' LIMIT 1").fetchone()
    if view:
        return f"the view {view[0]}"
    # a trigger runs on a run's writes: one on `metrics` counting a cross join held a run at its first round, deaf to
    # SIGTERM; MLflow's own only refuse a change (SELECT RAISE(ABORT, ...), no other query)
    for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall():
        if not _only_refuses(sql or ""):
            return f"the trigger {name}"
    # a generated column computes on every read (virtual; one of a 1.4 MB store made `fedbench report` take 26 s
    # and 3.7 GB) or write (stored): table_xinfo's `hidden` is 2 or 3 for one (SQLite >= 3.31); MLflow's schema
    # has stored ones of its own (spans.duration_ns), each taken only with MLflow's expression
    for table, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall():
        for column, hidden in con.execute("SELECT name, hidden FROM pragma_table_xinfo(?)", (table,)).fetchall():
            if hidden in (2, 3) and not (hidden == 3 and mlflow_computed(table, column, sql or "")):
                return f"the generated column {table}.{column}"
    return ""


def _only_refuses(sql: str) -> bool:
    """A trigger whose body is one `SELECT RAISE(ABORT, '...')` and which queries nothing else (its WHEN included)."""
    import re

    body = re.search(r"\bBEGIN\s+SELECT\s+RAISE\s*\(\s*ABORT\s*,\s*'[^']*'\s*\)\s*;\s*END\s*;?\s*$", sql,
                     re.IGNORECASE | re.DOTALL)
    return body is not None and len(re.findall(r"\bSELECT\b", sql, re.IGNORECASE)) == 1


def mlflow_computed(table: str, column: str, sql: str) -> bool:
    """Whether `column` of `table` (created by `sql`) is a stored column of MLflow's schema, with its expression."""
    import re

    from mlflow.store.tracking.dbmodels.models import Base

    model = Base.metadata.tables.get(table)
    computed = model is not None and column in model.columns and model.columns[column].computed
    if not computed:
        return False
    match = re.search(rf'(?:^|[\s(,"]){re.escape(column)}"?\s[^,]*?GENERATED ALWAYS AS \(([^()]*)\) STORED', sql)
    return match is not None and " ".join(match.group(1).split()) == " ".join(str(computed.sqltext).split())


def probe_server(uri: str, timeout: float = 5.0) -> None:
    """Connect once to a tracking server or database server, and log in once to a database: MLflow's own
    client retries a refused connection with backoff for minutes before it gives up (its database stores
    too)."""
    from fedbench.core.secrets import is_database_uri, store_address

    scheme, host, port = store_address(uri)  # the parser the connecting library agrees with
    if scheme in DEFAULT_PORTS and host:
        try:
            socket.create_connection((host, port or DEFAULT_PORTS[scheme]), timeout=timeout).close()
        except OSError as exc:
            start = "(mlflow server --port ...)" if scheme.startswith("http") else f"(its {scheme} server)"
            raise StoreUnreachableError(
                f"cannot reach the MLflow tracking {'server' if scheme.startswith('http') else 'store'} {uri}: "
                f"{exc.strerror or exc}. Start it {start} or use the local store (tracking.uri=null)"
            ) from None
    if is_database_uri(uri):
        log_in_once(uri)


def log_in_once(uri: str) -> None:
    """Open one connection to a database store: MLflow retries a failed one 10 times with backoff,
    101 s of silence before a refused login (no password, a wrong one) or a missing database is said."""
    import sqlalchemy

    from fedbench.core.secrets import password_hint, reveal

    try:
        engine = sqlalchemy.create_engine(reveal(uri), poolclass=sqlalchemy.pool.NullPool)
    except (ModuleNotFoundError, sqlalchemy.exc.NoSuchModuleError) as exc:
        # a driver not installed: SQLAlchemy 2.1 reads postgresql:// as psycopg 3's
        raise unusable_store(uri, exc, "; install it, or name an installed driver in the URI (fedbench's `postgres` "
                                       "extra installs psycopg2: postgresql+psycopg2://...)") from None
    except Exception as exc:  # noqa: BLE001 - a URL the driver cannot take
        raise unusable_store(uri, exc) from None
    try:
        with engine.connect():
            pass
    except Exception as exc:  # noqa: BLE001 - the driver's own error, as one line
        raise unusable_store(uri, exc, password_hint(uri)) from None
    finally:
        engine.dispose()


def unusable_store(uri: str, exc: BaseException, why: str = "") -> StoreUnreachableError:
    """The one-line error of a store that could not be opened: the library's reason, then `why`."""
    return StoreUnreachableError(f"cannot use the MLflow tracking store {uri}: {one_line(exc)}{why}")


# MLflow's client retries a request its server refuses 7 times with exponential backoff, about 4
# minutes a request, and a run that fails makes several: a run whose server died hung for many
# minutes before its one-line error. Bounded here (the user's own MLFLOW_HTTP_* settings win): a
# server restart of a few seconds is ridden out, a dead server ends the run within about 10 s.
HTTP_RETRY_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


def bound_http_retries(uri: str) -> None:
    """Bound MLflow's retries of a tracking server's requests (HTTP_RETRY_DEFAULTS)."""
    if uri.startswith(("http://", "https://")):
        for key, value in HTTP_RETRY_DEFAULTS.items():
            os.environ.setdefault(key, value)


@contextmanager
def one_attempt():
    """MLflow's requests without retries: marking a run FAILED after its server already failed
    should not wait out the retries of every call again."""
    key = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
    before = os.environ.get(key)
    os.environ[key] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


# MLflow 3's UI opens an experiment of this kind on its runs table (not the GenAI overview).
EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND_TAG = (EXPERIMENT_KIND, "custom_model_development")


def store_client(uri: str):
    """An MlflowClient on `uri`, for every opener of a store (runs, report, plot, reproduce, the API).

    A fresh SQLite store is created by MLflow's schema migrations when a client first opens it;
    processes that open it at once race on them and can leave the database unusable (or die at
    start). Every opener therefore opens it under one file lock beside the database (store_lock),
    so any number of runs, reports and plots may start together."""
    with store_lock(uri):
        return client_for(uri)  # creates (or migrates) the store now


def sqlite_file(db: Path, uri: str) -> None:
    """A SQLite store's path holds a file or nothing: SQLite opens a FIFO there and blocks on it forever. An existing
    store, a run's or a reader's, defines nothing a read runs (store_code: a run into a store with a recursive view
    hung before its first line, deaf to SIGTERM)."""
    import sqlite3

    from fedbench.core.errors import ConfigError
    from fedbench.core.user_files import user_file

    if not user_file(db, f"an MLflow store ({uri})", ConfigError, "remove it or give another tracking URI"):
        return
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=0.5)
        try:
            code = store_code(con)
        finally:
            con.close()
    except sqlite3.DatabaseError:  # not SQLite, or held locked: the reader's check or MLflow's open says so
        return
    if code:
        raise code_in_store(db, code)


def check_store_link(db: Path) -> None:
    """A run's SQLite store at a link leads to an MLflow store: a link planted in a shared outputs/ (to another
    program's database, an empty file, or nowhere) had the run write MLflow's tables into its target."""
    import sqlite3

    from fedbench.core.errors import ConfigError

    if not db.is_symlink():
        return
    target = db.resolve()
    tables = set()
    if target.is_file() and target.stat().st_size:
        try:
            con = sqlite3.connect(f"{target.as_uri()}?mode=ro", uri=True, timeout=0.5)
            try:
                tables = sqlite_tables(con)
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return  # a store in use: a run's, which MLflow's open then waits for
    if not MLFLOW_TABLES <= tables:
        raise ConfigError(f"{db} is a link to {target}, which is not an MLflow store: a run writes MLflow's tables "
                          "into a store that has them or into a new file of its own, never through a link; remove "
                          "the link, or name the store with tracking.uri")


def code_in_store(db: Path, code: str):
    from fedbench.core.errors import ConfigError

    return ConfigError(f"{db} is not an MLflow store as MLflow writes one: it defines {code}, which reading or writing "
                       "it would run (not MLflow's schema); fedbench runs nothing a store defines: give the mlflow.db that "
                       "fedbench run wrote, or another tracking URI")


@contextmanager
def store_lock(uri: str, create: bool = False, timeout: float = 600):
    """The lock of a SQLite store's creation and migration (a no-op for any other store); `create`
    makes the store's folder (a run's store), else a missing folder is left for the opener to report."""
    db = Path(uri.removeprefix("sqlite:///"))
    if not uri.startswith("sqlite:///") or not (create or db.parent.is_dir()):
        yield
        return
    sqlite_file(db, uri)
    if create:
        check_store_link(db)
    from filelock import FileLock

    try:
        if create:
            db.parent.mkdir(parents=True, exist_ok=True)
        # FileLock retries a lock file it cannot create (/proc, a vanished folder) silently until its timeout
        os.close(os.open(str(db) + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666))
        lock = FileLock(str(db) + ".lock", timeout=timeout)
        lock.acquire()
    except OSError as exc:
        if not create:  # a store on a read-only folder: read without the lock (nothing here migrates it)
            yield
            return
        raise FedbenchError(f"cannot use the MLflow tracking store {uri}: {exc.strerror or exc}") from None
    try:
        from fedbench.tracking.store_template import seed_new_store

        seed_new_store(db)  # MLflow's migrations, run once per machine, not once per store
        yield
    finally:
        lock.release()


def open_store(uri: str, experiment: str):
    """An MlflowClient on `uri` and the experiment's id (created if missing, under store_lock: two
    jobs of a sweep may create it at once)."""
    with store_lock(uri, create=True):
        client = client_for(uri)
        return client, ensure_experiment(client, experiment, uri)


def ensure_experiment(client, name: str, uri: str) -> str:
    """The experiment's id, creating it (with artifacts under outputs/ for the local store)."""
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        if EXPERIMENT_KIND not in existing.tags:
            client.set_experiment_tag(existing.experiment_id, *EXPERIMENT_KIND_TAG)
        return existing.experiment_id
    artifact_location = default_artifact_root() if uri.startswith("sqlite:") else None
    try:
        return client.create_experiment(name, artifact_location=artifact_location, tags=dict([EXPERIMENT_KIND_TAG]))
    except Exception:  # a concurrent job created it first
        existing = client.get_experiment_by_name(name)
        if existing is None:
            raise
        return existing.experiment_id
