"""Where runs are recorded: the embedded local MLflow store under outputs/, or a server."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from fedbench.errors import FedbenchError

DEFAULT_OUTPUTS = Path("outputs")


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


def ensure_experiment(client, name: str, uri: str) -> str:
    """The experiment's id, creating it (with artifacts under outputs/ for the local store)."""
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    artifact_location = default_artifact_root() if uri.startswith("sqlite:") else None
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except Exception:  # a concurrent job created it first
        existing = client.get_experiment_by_name(name)
        if existing is None:
            raise
        return existing.experiment_id
