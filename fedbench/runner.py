"""One training run: validate, build, record in MLflow, train with a progress bar, summarise."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from fedbench.engine.build import build_federation
from fedbench.engine.checkpoint import load_checkpoint, save_checkpoint
from fedbench.engine.loop import initial_state, run
from fedbench.errors import DivergenceError, FedbenchError
from fedbench.tracking.targets import format_rounds

CHECKPOINT_NAME = "checkpoint.pt"


def quiet_libraries() -> None:
    import logging

    import mlflow  # noqa: F401  (configures its loggers on import: silence them afterwards)

    for name in ("mlflow", "alembic", "matplotlib", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)


def config_hash(cfg: DictConfig) -> str:
    """Hash of the resolved config without run-placement keys (hydra, tracking, engine)."""
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in ("hydra", "tracking", "resume"):
        container.pop(key, None)
    return hashlib.sha256(OmegaConf.to_yaml(OmegaConf.create(container)).encode()).hexdigest()[:16]


def run_job(cfg: DictConfig, run_dir: Path, quiet: bool = False) -> dict[str, Any]:
    """Train one configuration; raises FedbenchError subclasses for the CLI to report."""
    from fedbench.tracking.recorder import Recorder

    quiet_libraries()
    if cfg.engine.get("threads"):
        torch.set_num_threads(int(cfg.engine.threads))
    fed, info = build_federation(cfg)  # every config and data error surfaces here, before MLflow
    recorder = Recorder(cfg)
    try:
        recorder.check_reachable()
    except Exception as exc:
        raise FedbenchError(f"cannot reach the MLflow tracking store {recorder.uri}: {exc}") from None

    state = initial_state(fed)
    checkpoint = run_dir / CHECKPOINT_NAME
    digest = config_hash(cfg)
    resumed_run_id = None
    if cfg.get("resume") and checkpoint.exists():
        meta = load_checkpoint(checkpoint, state, fed.device)
        if meta["config_hash"] != digest:
            raise FedbenchError(f"{checkpoint} was written by a different config; refusing to resume")
        resumed_run_id = meta["run_id"]
    run_id = recorder.start(
        {
            "partition_fingerprint": info.partition_fingerprint,
            "dataset": cfg.dataset.name,
            "algorithm": cfg.algorithm.name,
            "config_hash": digest,
            "executor": info.executor,
            "device": info.device,
        },
        run_id=resumed_run_id,
    )
    if not quiet:
        print(
            f"fedbench: {cfg.algorithm.name} on {cfg.dataset.name} ({info.num_train} train / {info.num_test} test), "
            f"partition {cfg.partition.name} [{info.partition_fingerprint}], model {cfg.model.name} d={info.dim:,}, "
            f"{cfg.clients_per_round}/{cfg.num_clients} clients per round, executor {info.executor} on {info.device}",
            file=sys.stderr,
        )
    bar = None
    if not quiet:
        from tqdm import tqdm

        bar = tqdm(total=fed.rounds, initial=state.round, desc="rounds", file=sys.stderr, dynamic_ncols=True)
    every = int(cfg.tracking.get("checkpoint_every") or 0)

    def on_round(st, metrics):
        recorder.log_round(metrics)
        if bar is not None:
            post = {k.replace("test_", ""): f"{metrics[k]:.4f}" for k in ("test_accuracy", "test_loss") if k in metrics}
            bar.set_postfix(post, refresh=False)
            bar.update(1)
        if every and st.round % every == 0 and st.round < fed.rounds:
            recorder.flush()
            save_checkpoint(checkpoint, st, run_id, digest)

    try:
        state = run(fed, state, on_round)
    except DivergenceError as exc:
        recorder.fail(exc.round, exc.reason)
        raise
    except KeyboardInterrupt:
        save_checkpoint(checkpoint, state, run_id, digest)
        recorder.fail(state.round, "interrupted (Ctrl-C); resume with resume=true", status="KILLED")
        raise
    finally:
        if bar is not None:
            bar.close()
    save_checkpoint(checkpoint, state, run_id, digest)
    summary = recorder.finish(state.history, artifacts=bool(cfg.tracking.get("artifacts", True)))
    accs = [h["test_accuracy"] for h in state.history if "test_accuracy" in h]
    summary.update(
        final_accuracy=accs[-1] if accs else None,
        best_accuracy=max(accs) if accs else None,
        final_loss=next((h["test_loss"] for h in reversed(state.history) if "test_loss" in h), None),
        wall_time=state.wall_time,
        rounds=state.round,
        tracking_uri=recorder.uri,
    )
    if not quiet:
        print(format_summary(summary, fed.rounds))
    return summary


def format_summary(summary: dict[str, Any], rounds: int) -> str:
    lines = ["", "== fedbench run summary =="]
    if summary.get("final_accuracy") is not None:
        lines.append(f"final test accuracy  {summary['final_accuracy']:.4f}   best {summary['best_accuracy']:.4f}")
    if summary.get("final_loss") is not None:
        lines.append(f"final test loss      {summary['final_loss']:.4f}")
    for target, reached in summary.get("rounds_to_target", {}).items():
        lines.append(f"rounds to {target:g}".ljust(21) + format_rounds(reached, rounds))
    lines.append(f"wall time            {summary['wall_time']:.1f} s ({summary['rounds']} rounds)")
    lines.append(f"MLflow run           {summary['run_id']}")
    uri = summary.get("tracking_uri", "")
    lines.append(f"open with            mlflow ui --backend-store-uri {uri}")
    return "\n".join(lines)
