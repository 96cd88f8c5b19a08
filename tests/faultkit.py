"""Helpers of the fault and resume tests: the `fedbench` command in a subprocess, the record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A run of ~10 ms per round on a loaded 2-core CPU: digits, 2 of 4 clients, 2 local steps.
SMALL = ["num_clients=4", "clients_per_round=2", "local_steps=2", "local_epochs=null", "batch_size=10",
         "engine.executor=loop", "engine.threads=1", "tracking.artifacts=false"]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def fedbench(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedbench.cli", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=timeout)


def start(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fedbench.cli", *args], cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def runs(db: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    return client, [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def record_as(run_dir: Path, overrides: list[str], rounds: int, edit=None) -> None:
    """Rewrite a run folder as another version recorded it: its overrides, its config (`rounds`, and
    `edit(config)` for a recorded layout), and the checkpoint's config hash to match."""
    import torch
    from omegaconf import OmegaConf

    from fedbench.runs.single import CHECKPOINT_NAME, config_hash

    hydra = run_dir / ".hydra"
    OmegaConf.save(OmegaConf.create(list(overrides)), hydra / "overrides.yaml")
    recorded = OmegaConf.load(hydra / "config.yaml")
    recorded.rounds = rounds
    if edit is not None:
        edit(recorded)
    OmegaConf.save(recorded, hydra / "config.yaml")
    payload = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    payload["config_hash"] = config_hash(recorded)
    payload.pop("recorded_digest", None)  # an earlier version's checkpoint: no digest of its record
    torch.save(payload, run_dir / CHECKPOINT_NAME)
    uri = next((o.split("=", 1)[1] for o in overrides if o.startswith("tracking.uri=")), None)
    if uri is not None and payload["round"] < rounds:  # stopped before its last round: its record is not FINISHED
        from mlflow.tracking import MlflowClient

        MlflowClient(uri).set_terminated(payload["run_id"], "KILLED")
