"""Where runs are recorded: the embedded local MLflow store under outputs/, or a server."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_OUTPUTS = Path("outputs")


def default_tracking_uri(outputs: Path = DEFAULT_OUTPUTS) -> str:
    """A SQLite store (MLflow's file store is in maintenance mode and refuses new stores)."""
    outputs.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(outputs / 'mlflow.db').resolve()}"


def default_artifact_root(outputs: Path = DEFAULT_OUTPUTS) -> str:
    return (outputs / "mlartifacts").resolve().as_uri()


def resolve_tracking_uri(uri: str | None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


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
