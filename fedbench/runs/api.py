"""The Python API for notebooks and scripts: one run or a grid, with the results in memory.

    import fedbench
    result = fedbench.run(["algorithm=fedprox", "rounds=20"])
    result.history            # a DataFrame, one row per round
    result.summary            # final/best accuracy, rounds to target, wall time
    result.run_id             # the MLflow run

The overrides are exactly those of `fedbench run`; every job is checked first (a bad value raises
fedbench.core.errors.ConfigError before any work). Runs are recorded in MLflow and checkpointed in
their run folder as from the command line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd


@dataclass
class RunResult:
    """One run's results: its per-round history, its summary and where it is recorded."""

    overrides: list[str]
    history: pd.DataFrame
    summary: dict[str, Any] = field(repr=False)
    run_id: str = ""
    run_dir: Path | None = None

    @property
    def final_accuracy(self) -> float | None:
        return self.summary.get("final_accuracy")


def run(overrides: list[str] | tuple[str, ...] = (), run_dir: str | Path | None = None,
        progress: bool = False) -> RunResult:
    """Train one configuration (the `fedbench run` overrides) and return its results."""
    [job] = _jobs(list(overrides), multirun=False)
    return _run_one(job, run_dir, progress)


def sweep(overrides: list[str] | tuple[str, ...] = (), sweep_dir: str | Path | None = None,
          progress: bool = False) -> list[RunResult]:
    """Train every job of a grid (comma-separated values, as `fedbench run -m`), one after another in
    this process; returns one RunResult per job, in Hydra's job order."""
    jobs = _jobs(list(overrides), multirun=True)
    folder = Path(sweep_dir) if sweep_dir is not None else _default_folder("multirun", "sweep")
    return [_run_one(job, folder / str(i), progress, sweep=True) for i, job in enumerate(jobs)]


def summary_table(results: list[RunResult]) -> pd.DataFrame:
    """One row per run: its overrides and the scalar entries of its summary."""
    return pd.DataFrame([{"overrides": " ".join(r.overrides), "run_id": r.run_id,
                          **{k: v for k, v in r.summary.items() if isinstance(v, (int, float, str)) or v is None}}
                         for r in results])


def _jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    from fedbench.config.compose import conf_dir
    from fedbench.config.preflight import expand_jobs, preflight
    from fedbench.core.errors import ConfigError

    if not multirun and any(o.is_sweep_override() for o in _parsed(overrides)):  # before preflight's "add -m"
        raise ConfigError(f"{len(expand_jobs(overrides))} jobs in {overrides}: use fedbench.sweep for a grid")
    preflight(conf_dir(), [*overrides, *(["--multirun"] if multirun else [])])
    jobs = expand_jobs(overrides)
    return jobs


def _default_folder(kind: str, name: str) -> Path:
    now = datetime.now()
    return Path("outputs") / kind / now.strftime("%Y-%m-%d") / f"{now.strftime('%H-%M-%S')}_{name}_{os.getpid()}"


def _run_one(job: list[str], run_dir: str | Path | None, progress: bool, sweep: bool = False) -> RunResult:
    from fedbench.config.compose import compose

    cfg = compose(job)
    folder = Path(run_dir) if run_dir is not None else _default_folder("runs", f"{cfg.algorithm.name}_{cfg.dataset.name}")
    return run_composed(cfg, job, folder, progress, sweep=sweep)


def run_composed(cfg, job: list[str], run_dir: Path, progress: bool = False, label: str = "",
                 sweep: bool = False) -> RunResult:
    """Train `cfg`, the config composed (and checked) from the overrides `job`, in `run_dir`.

    The overrides are recorded with the run and saved in run_dir/.hydra/overrides.yaml, as a
    `fedbench run` saves them, so that an interrupted run continues with `fedbench resume run_dir`.
    `label` prefixes its progress lines; `sweep` lets tracking.skip_finished skip a finished config."""
    from omegaconf import OmegaConf

    from fedbench.runs.single import check_writable, run_job

    check_writable(run_dir / ".hydra")
    OmegaConf.save(OmegaConf.create(list(job)), run_dir / ".hydra" / "overrides.yaml")
    summary = run_job(cfg, run_dir, quiet=not progress, tags={"overrides": " ".join(job)[:5000]}, sweep=sweep, label=label)
    history = summary.pop("history", None)
    if history is None:  # a finished configuration skipped in a sweep: read its record back
        history = _history_from_mlflow(summary["tracking_uri"], summary["run_id"])
    return RunResult(list(job), pd.DataFrame(history), summary, summary["run_id"], run_dir)


def run_batched(jobs: list[tuple[Any, list[str], Path, str]], progress: bool = False, sweep: bool = False
                ) -> list[RunResult | Exception]:
    """run_composed for many jobs (cfg, overrides, run_dir, label) at once: those that share data set,
    split and model train as lanes of one program (runs.batched, as hydra/launcher=batched); each is
    recorded and checkpointed as if run alone. Returns per job its RunResult or the exception it
    failed with (the others still run)."""
    from omegaconf import OmegaConf

    from fedbench.runs.batched import GroupJob, run_group, split_groups
    from fedbench.runs.single import check_writable

    specs = []
    for cfg, overrides, run_dir, label in jobs:
        check_writable(run_dir / ".hydra")
        OmegaConf.save(OmegaConf.create(list(overrides)), run_dir / ".hydra" / "overrides.yaml")
        specs.append(GroupJob(cfg, run_dir, {"overrides": " ".join(overrides)[:5000]}, label))
    out: list[RunResult | Exception] = [None] * len(jobs)  # type: ignore[list-item]
    for members in split_groups(specs, 0):
        results = run_group([specs[i] for i in members], quiet=not progress, sweep=sweep)
        for i, result in zip(members, results):
            if isinstance(result, BaseException):
                out[i] = result
                continue
            history = result.pop("history", None)
            if history is None:
                history = _history_from_mlflow(result["tracking_uri"], result["run_id"])
            out[i] = RunResult(list(jobs[i][1]), pd.DataFrame(history), result, result["run_id"], jobs[i][2])
    return out


def _history_from_mlflow(uri: str, run_id: str) -> list[dict[str, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    rows: dict[int, dict[str, float]] = {}
    for key in client.get_run(run_id).data.metrics:
        for m in client.get_metric_history(run_id, key):
            rows.setdefault(m.step, {"round": m.step})[key] = m.value
    return [rows[k] for k in sorted(rows) if k > 0]


def _parsed(overrides: list[str]) -> list:
    """Hydra's parse of the overrides; none when they do not parse (preflight reports that)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception:
        return []
