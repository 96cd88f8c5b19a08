"""A new SQLite store, made by copying the empty store MLflow's migrations make.

MLflow makes a new SQLite store by running each of its schema migrations in turn (about a second,
more than a short run's training), and does so for every new store: every new project folder,
every reproduction, every test's store. The result depends only on the versions of MLflow,
SQLAlchemy and alembic, so fedbench makes it once per set of versions, in the user's cache folder
(XDG_CACHE_HOME, else ~/.cache: fedbench/), and copies it to a new store's path; MLflow then opens
the store as one it made (it checks the schema's version as it does for any store). Anything that
goes wrong here (no cache folder, a template that is not one) leaves the store to MLflow, as before.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import tempfile
from pathlib import Path


def cache_folder() -> Path:
    """XDG_CACHE_HOME/fedbench, else ~/.cache/fedbench (a relative XDG_CACHE_HOME is ignored, as the XDG
    specification says: it would put a template in whatever folder a command runs in)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "fedbench"


def template_path() -> Path:
    """The template of the MLflow, SQLAlchemy and alembic this process runs (another version makes another schema)."""
    import alembic
    import mlflow
    import sqlalchemy

    versions = "-".join(f"{m.__name__}{m.__version__}" for m in (mlflow, sqlalchemy, alembic))
    return cache_folder() / f"empty-mlflow-store-{versions}.db"


def make_template(path: Path) -> None:
    """MLflow's own creation of a store's tables (what its store runs on an empty database), into a file
    of this process's, moved into place whole: processes that make it at once each leave a complete one."""
    import logging

    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    for name in ("mlflow", "alembic"):  # MLflow sets its loggers up on import: what a new store prints, as before
        logging.getLogger(name).setLevel(logging.WARNING)
    # only in a cache folder of this user's (`sudo fedbench` with the invoking user's HOME leaves no file of root's
    # in that user's folders)
    existing = next(folder for folder in (path.parent, *path.parent.parents) if folder.exists())
    if not owned(existing):
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, made = tempfile.mkstemp(dir=path.parent, prefix=".making-", suffix=".db")
    os.close(fd)
    try:
        engine = sqlalchemy.create_engine(f"sqlite:///{made}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        os.replace(made, path)
    except BaseException:
        Path(made).unlink(missing_ok=True)
        raise


def is_template(path: Path) -> bool:
    """An empty store as MLflow's migrations leave it: a whole SQLite file, MLflow's tables (no view, which
    reading would run), no experiment, and a schema version; in a file and folder that only this user
    can have written (a cache folder set to a shared one is not trusted)."""
    try:
        if not (owned(path) and owned(path.parent)):
            return False
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=0.5)
        try:
            if con.execute("PRAGMA quick_check").fetchone()[0] != "ok":  # a damaged page, copied to every new store
                return False
            if con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'view'").fetchone()[0]:
                return False
            experiments = con.execute("SELECT count(*) FROM experiments").fetchone()[0]
            schema = con.execute("SELECT count(*) FROM alembic_version").fetchone()[0]
            return experiments == 0 and schema == 1
        finally:
            con.close()
    except (OSError, sqlite3.Error):
        return False


def owned(path: Path) -> bool:
    """A file or folder of this user's that no other user can write (a link: its target)."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def seed_new_store(db: Path) -> None:
    """Put the template at `db`, where there is nothing yet (the caller holds the store's lock); leave it to
    MLflow where the template cannot be made or read."""
    if os.path.lexists(db) or not db.parent.is_dir():
        return
    try:
        template = template_path()
        if not is_template(template):
            make_template(template)
            if not is_template(template):
                return
        copy = db.parent / f".{db.name}.{os.getpid()}.{secrets.token_hex(4)}.new"
        # made as SQLite makes a database file (0644 less the umask), then linked: never over a store that
        # appeared meanwhile
        out = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(out, "wb") as target, open(template, "rb") as source:
                shutil.copyfileobj(source, target)
            os.link(copy, db)
        finally:
            copy.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - MLflow makes the store, as it would without a template
        return
