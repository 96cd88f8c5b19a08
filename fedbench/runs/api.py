"""The Python API for notebooks and scripts: one run or a grid, with the results in memory.

    import fedbench
    result = fedbench.run(["algorithm=fedprox", "rounds=20"])
    result.history            # a DataFrame, one row per round
    result.summary            # final/best accuracy, rounds to target, wall time
    result.run_id             # the MLflow run
    fedbench.report(target=0.8, baseline="fedavg")   # `fedbench report`'s table as a DataFrame
    fedbench.plot()           # `fedbench plot`'s figure (matplotlib)

The overrides are exactly those of `fedbench run`; every job is checked first (a bad value raises
fedbench.core.errors.ConfigError before any work). Runs are recorded in MLflow and checkpointed in
their run folder as from the command line.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
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


ConfigDirs = str | Path | list[str | Path] | tuple[str | Path, ...] | None


def run(overrides: list[str] | tuple[str, ...] = (), run_dir: str | Path | None = None,
        progress: bool | None = None, config_dir: ConfigDirs = None) -> RunResult:
    """Train one configuration (the `fedbench run` overrides) and return its results. `progress`: None
    shows a progress bar (tqdm.auto) and the run's lines in a notebook or a terminal, nothing elsewhere;
    True or False to choose. `config_dir`: one or more folders of config groups searched beside the
    packaged ones, as `fedbench run --config-dir` (a user's own algorithm's yaml, docs/own_method.md)."""
    dirs = _config_dirs(config_dir)
    [job] = _jobs(list(overrides), multirun=False, dirs=dirs)
    return _run_one(job, run_dir, _progress(progress), dirs=dirs)


def sweep(overrides: list[str] | tuple[str, ...] = (), sweep_dir: str | Path | None = None,
          progress: bool | None = None, config_dir: ConfigDirs = None) -> list[RunResult]:
    """Train every job of a grid (comma-separated values, as `fedbench run -m`), one after another in
    this process; returns one RunResult per job, in Hydra's job order. `progress` and `config_dir` as for run."""
    dirs = _config_dirs(config_dir)
    jobs = _jobs(list(overrides), multirun=True, dirs=dirs)
    folder = Path(sweep_dir) if sweep_dir is not None else _default_folder("multirun", "sweep")
    shown = _progress(progress)
    return [_run_one(job, folder / str(i), shown, sweep=True, dirs=dirs) for i, job in enumerate(jobs)]


def _config_dirs(config_dir: ConfigDirs) -> tuple[Path, ...]:
    from fedbench.core.errors import ConfigError

    given = [] if config_dir is None else [config_dir] if isinstance(config_dir, (str, Path)) else list(config_dir)
    dirs = tuple(Path(d).expanduser().absolute() for d in given)
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(f"config_dir={d}: no such folder (a folder of config groups, e.g. algorithm/<name>.yaml)")
    return dirs


def _progress(progress: bool | None) -> bool:
    from fedbench.runs.single import interactive

    return interactive() if progress is None else progress


def summary_table(results: list[RunResult], over_seeds: bool = False) -> pd.DataFrame:
    """One row per run: its overrides, the scalar entries of its summary and rounds_to_<t> per target (NaN:
    not reached). `over_seeds`: one row per configuration (the overrides but `seed`) with n runs, the mean
    and sample std of each metric over its seeds, and rounds_to_<t>_reached, how many seeds reached t."""
    rows = []
    for r in results:
        reached = {f"rounds_to_{t:g}": float("nan") if v is None else v
                   for t, v in (r.summary.get("rounds_to_target") or {}).items()}
        rows.append({"overrides": " ".join(r.overrides), "run_id": r.run_id,
                     **{k: v for k, v in r.summary.items() if isinstance(v, (int, float, str)) or v is None},
                     **reached})
    table = pd.DataFrame(rows)
    if not over_seeds or table.empty:
        return table
    table["config"] = [" ".join(o for o in r.overrides if o.split("=", 1)[0] != "seed") for r in results]
    groups = table.groupby("config", sort=False)
    out = groups.size().rename("n").to_frame()
    metrics = ["final_accuracy", "best_accuracy", "final_loss", *(c for c in table if c.startswith("rounds_to_"))]
    for metric in (m for m in metrics if m in table):
        values = pd.to_numeric(table[metric], errors="coerce").groupby(table["config"], sort=False)
        out[f"{metric}_mean"], out[f"{metric}_std"] = values.mean(), values.std(ddof=1)
        if metric.startswith("rounds_to_"):
            out[f"{metric}_reached"] = values.count()
    return out.reset_index()


def report(experiment: str = "fedbench", target: float | None = None, baseline: str | None = None,
           settings: list[str] | None = None, best_by: str | None = None, last: int = 0, filter_string: str = "",
           uri: str | None = None, numeric: bool = False) -> pd.DataFrame:
    """`fedbench report`'s table of the experiment's FINISHED runs as a DataFrame: one row per method and
    setting, `mean ± std` cells, or (`numeric`) the numbers: n, <metric>_mean, <metric>_std, ..."""
    from fedbench.tracking.report import report_table

    return report_table(experiment, target, baseline, settings, best_by, last, filter_string, uri, numeric)


def plot(experiment: str = "fedbench", metric: str = "test_accuracy", x: str = "round",
         settings: list[str] | None = None, title: str | None = None, filter_string: str = "", uri: str | None = None):
    """`fedbench plot`'s figure (a matplotlib Figure): `metric` per round (or per `x`), one line per method
    and setting, the mean over seeds with a ± std band. `fig.savefig(...)` writes it."""
    from fedbench.tracking.report import comparison_plot

    return comparison_plot(experiment, metric, x, settings, title, filter_string, uri)[0]


def _jobs(overrides: list[str], multirun: bool, dirs: tuple[Path, ...] = ()) -> list[list[str]]:
    from fedbench.config.compose import conf_dir
    from fedbench.config.preflight import expand_jobs, preflight
    from fedbench.core.errors import ConfigError
    from fedbench.core.secrets import install, withhold
    from fedbench.runs.interrupts import forget_signals

    install()
    forget_signals()
    overrides = withhold(overrides)
    if not multirun and any(o.is_sweep_override() for o in _parsed(overrides)):  # before preflight's "add -m"
        raise ConfigError(f"{len(expand_jobs(overrides))} jobs in {overrides}: use fedbench.sweep for a grid")
    preflight(conf_dir(), [*overrides, *(["--multirun"] if multirun else []),
                           *(arg for d in dirs for arg in ("--config-dir", str(d)))])
    jobs = expand_jobs(overrides)
    return jobs


def _default_folder(kind: str, name: str) -> Path:
    now = datetime.now()
    return Path("outputs") / kind / now.strftime("%Y-%m-%d") / f"{now.strftime('%H-%M-%S')}_{name}_{os.getpid()}"


def _run_one(job: list[str], run_dir: str | Path | None, progress: bool, sweep: bool = False,
             dirs: tuple[Path, ...] = ()) -> RunResult:
    from fedbench.config.compose import compose
    from fedbench.config.preflight import searchpath

    cfg = compose([*job, *searchpath(dirs)])
    folder = Path(run_dir) if run_dir is not None else _default_folder("runs", f"{cfg.algorithm.name}_{cfg.dataset.name}")
    return run_composed(cfg, job, folder, progress, sweep=sweep, config_dirs=dirs)


def run_composed(cfg, job: list[str], run_dir: Path, progress: bool = False, label: str = "",
                 sweep: bool = False, config_dirs: tuple[Path, ...] = ()) -> RunResult:
    """Train `cfg`, the config composed (and checked) from the overrides `job`, in `run_dir`.

    The overrides are recorded with the run and saved in run_dir/.hydra/overrides.yaml, as a
    `fedbench run` saves them, so that an interrupted run continues with `fedbench resume run_dir`.
    `label` prefixes its progress lines; `sweep` lets tracking.skip_finished skip a finished config;
    `config_dirs` (--config-dir folders) are recorded for resume as `fedbench run` records them."""
    from fedbench.runs.single import run_job

    from fedbench.core.secrets import withhold

    job = withhold(list(job))  # what .hydra/ and the tag record: never a store's password
    with owned([(run_dir, job, sweep or bool(cfg.get("resume")))]):
        from fedbench.runs.hydra_app import write_config_record

        conf, dirs = write_config_record(run_dir / ".hydra", [str(d) for d in config_dirs]) if config_dirs else (None, [])
        summary = run_job(cfg, run_dir, quiet=not progress, tags=record_tags(job, conf, dirs), sweep=sweep,
                          label=label)
    history = summary.pop("history", None)
    if history is None:  # a finished configuration skipped in a sweep: read its record back
        history = _history_from_mlflow(summary["tracking_uri"], summary["run_id"])
    return RunResult(list(job), history_frame(history), summary, summary["run_id"], run_dir)


def record_tags(overrides: list[str], fedbench_conf: str | None = None, config_dirs: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """The run's tags: its overrides, and the digest of its record that its checkpoints keep (runs.recorded)."""
    from fedbench.engine.checkpoint import RECORD_DIGEST
    from fedbench.runs.recorded import digest

    recorded = digest(list(overrides), fedbench_conf, list(config_dirs))
    return {"overrides": " ".join(overrides)[:5000], **({RECORD_DIGEST: recorded} if recorded is not None else {})}


def history_frame(history: list[dict[str, float]]) -> pd.DataFrame:
    """One row per round, `round` first (the engine adds it to each round's metrics last)."""
    frame = pd.DataFrame(history)
    return frame[["round", *(c for c in frame if c != "round")]] if "round" in frame else frame


def run_batched(jobs: list[tuple[Any, list[str], Path, str]], progress: bool = False, sweep: bool = False,
                workers: int = 1) -> list[RunResult | Exception]:
    """run_composed for many jobs (cfg, overrides, run_dir, label) at once: those that share data set,
    split and model train as lanes of one program (runs.batched, as hydra/launcher=batched); each is
    recorded and checkpointed as if run alone. Returns per job its RunResult or the exception it
    failed with (the others still run). `workers` > 1: the groups (jobs with different data: a
    reproduction's seeds) train that many at once, each in a worker process (runs.parallel), with the
    results of one process."""
    from fedbench.runs.batched import GroupJob, split_groups

    from fedbench.core.secrets import withhold

    jobs = [(cfg, withhold(list(overrides)), run_dir, label) for cfg, overrides, run_dir, label in jobs]  # no password
    specs = [GroupJob(cfg, run_dir, record_tags(overrides), label)
             for cfg, overrides, run_dir, label in jobs]
    groups = split_groups(specs, 0)
    members = [[(specs[i], jobs[i][1], sweep or bool(jobs[i][0].get("resume"))) for i in group] for group in groups]
    if workers > 1 and len(groups) > 1:
        from fedbench.runs.parallel import run_groups
        from fedbench.tracking.store import resolve_tracking_uri

        stores = {(resolve_tracking_uri(cfg.tracking.get("uri")), str(cfg.tracking.experiment)) for cfg, *_ in jobs}
        outcomes = run_groups(train_group, members, workers, quiet=not progress, sweep=sweep, stores=stores)
    else:
        outcomes = (train_group(group, quiet=not progress, sweep=sweep) for group in members)
    out: list[RunResult | Exception] = [None] * len(jobs)  # type: ignore[list-item]
    for group, results in zip(groups, outcomes):
        for i, result in zip(group, results):
            if isinstance(result, BaseException):
                out[i] = result
                continue
            history = result.pop("history", None)
            if history is None:
                history = _history_from_mlflow(result["tracking_uri"], result["run_id"])
            out[i] = RunResult(list(jobs[i][1]), history_frame(history), result, result["run_id"], jobs[i][2])
    return out


def train_group(members: list[tuple[Any, list[str], bool]], quiet: bool, sweep: bool) -> list[dict[str, Any] | BaseException]:
    """One group of run_batched (its members: GroupJob, overrides, whether it may continue a checkpoint) trained
    as lanes in this process, each run folder owned meanwhile (runs.batched.run_group)."""
    from fedbench.runs.batched import run_group

    with owned([(spec.run_dir, overrides, continues) for spec, overrides, continues in members]):
        return run_group([spec for spec, _, _ in members], quiet=quiet, sweep=sweep)


@contextmanager
def owned(folders: list[tuple[Path, list[str], bool]]):
    """Own each run folder (core.ownership), then save its overrides in .hydra/overrides.yaml as `fedbench run`
    does, so that `fedbench resume` continues the run; the folders are released when the runs end. The flag
    of a folder: its run may continue a checkpoint there (resume=true, or a sweep's skip-finished)."""
    from omegaconf import OmegaConf

    from fedbench.core.ownership import claim, discard_made, refuse_overwrite, release
    from fedbench.runs.single import check_writable

    taken = []
    try:
        for run_dir, _, continues in folders:
            claim(run_dir)
            taken.append(run_dir)
            if not continues:
                refuse_overwrite(run_dir)
    except BaseException:  # refused before any write: what the claims made goes again
        for run_dir in taken:
            discard_made(run_dir)
        raise
    try:
        for run_dir, job, _ in folders:
            check_writable(run_dir / ".hydra")
            OmegaConf.save(OmegaConf.create(list(job)), run_dir / ".hydra" / "overrides.yaml")
        yield
    finally:
        for run_dir in taken:
            release(run_dir)


def _history_from_mlflow(uri: str, run_id: str) -> list[dict[str, float]]:
    from fedbench.tracking.store import store_client

    client = store_client(uri)
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
