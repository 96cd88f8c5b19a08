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


def one_line(exc: BaseException) -> str:
    """An exception as one short line (sqlalchemy and MLflow errors carry SQL and URLs on many lines)."""
    text = " ".join(str(exc).split())
    for noise in (" [SQL:", " (Background on this error"):  # sqlalchemy's statement and help link
        text = text.split(noise)[0]
    return f"{exc.__class__.__name__}: {text[:300]}"


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
    return f"sqlite:///{(outputs / 'mlflow.db').resolve()}"


def default_artifact_root(outputs: Path = DEFAULT_OUTPUTS) -> str:
    return (outputs / "mlartifacts").resolve().as_uri()


def resolve_tracking_uri(uri: str | None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


def existing_store(uri: str | None, option: str = "--uri") -> str:
    """The store a reader (report, plot) opens: one that exists. MLflow would create an empty one at a
    mistyped path (and the default one under outputs/ in whatever folder the command runs in)."""
    from fedbench.core.errors import ConfigError

    store = uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(DEFAULT_OUTPUTS / 'mlflow.db').resolve()}"
    if store.startswith(("http://", "https://", "databricks", "postgresql", "mysql", "mssql")):
        return store  # a server or a database: reaching it is the check
    path = Path(store.removeprefix("sqlite:///").removeprefix("file://"))
    if store.startswith("sqlite:///") and not path.is_file() or not store.startswith("sqlite:") and not path.exists():
        where = option if uri else "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else None
        fix = f"check {where}" if where else f"run it from the folder fedbench run wrote outputs/ in, or give {option}"
        raise ConfigError(f"no MLflow store at {path} ({store}); {fix} (a reader never creates a store)")
    return store


def probe_server(uri: str, timeout: float = 5.0) -> None:
    """Connect once to an http(s) tracking server: MLflow's own client retries a refused
    connection with backoff for minutes before it gives up."""
    from urllib.parse import urlparse

    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
    except OSError as exc:
        raise FedbenchError(
            f"cannot reach the MLflow tracking server {uri}: {exc.strerror or exc}. Start it "
            "(mlflow server --port ...) or use the local store (tracking.uri=null)"
        ) from None


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


def open_store(uri: str, experiment: str):
    """An MlflowClient on `uri` and the experiment's id (created if missing).

    A fresh SQLite store is created by MLflow's schema migrations on first use; processes that
    start at once race on them and can leave the database unusable. The first use therefore
    happens under a file lock beside the database, so any number of runs may start together."""
    from mlflow.tracking import MlflowClient

    if not uri.startswith("sqlite:///"):
        client = MlflowClient(uri)
        return client, ensure_experiment(client, experiment, uri)
    from filelock import FileLock

    db = Path(uri.removeprefix("sqlite:///"))
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(db) + ".lock", timeout=600)
        with lock:
            client = MlflowClient(uri)
            return client, ensure_experiment(client, experiment, uri)
    except OSError as exc:
        raise FedbenchError(f"cannot use the MLflow tracking store {uri}: {exc.strerror or exc}") from None


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
