"""Hydra run and multirun support: the run (or sweep) folder is owned before Hydra writes there,
failed jobs are collected, the tracking store is prepared once.

Jobs may run in other processes (joblib) or on other machines (Ray, SLURM), so a failed job
leaves a marker file in its output folder, and the launching process reads the markers back
when the sweep ends (on a cluster, the sweep folder must be on a shared file system).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from fedbench.tracking.sweeps import sweep_filter

FAILED_MARKER = "FAILED"
FAILURES: list[str] = []  # filled at the end of a multirun, read by cli.hydra_main
CLAIMED: list[Path] = []  # the run or sweep folder this process owns until cli.hydra_main returns
STOPPING = None  # the joblib sweep's signal forwarding (runs.interrupts.SweepStop) until cli.hydra_main returns


def own_folder(config: DictConfig, key: str, what: str, resume: bool = False) -> None:
    """Own the run (or sweep) folder before Hydra writes its .hydra/ and log there (core.ownership):
    a second live writer, or a new run over another's checkpoint, ends here in one line (exit 2).
    cli.hydra_main releases it when the command ends."""
    from fedbench.core.errors import FedbenchError, report_error
    from fedbench.core.ownership import claim, refuse_overwrite

    try:
        folder = Path(str(OmegaConf.select(config, key)))
    except Exception:  # an interpolation only a job resolves: its run claims the folder when it opens
        return
    try:
        claim(folder, what)
        CLAIMED.append(folder)
        if not resume:
            refuse_overwrite(folder)
    except FedbenchError as exc:
        report_error(exc)
        raise SystemExit(exc.exit_code) from None


def release_folders() -> None:
    from fedbench.core.ownership import release

    global STOPPING
    if STOPPING is not None:
        STOPPING.__exit__(None, None, None)
        STOPPING = None
    while CLAIMED:
        release(CLAIMED.pop())


class SweepCallback(Callback):
    """Registered in conf/config.yaml under hydra.callbacks."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        own_folder(config, "hydra.run.dir", "run directory", resume=bool(config.get("resume")))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Hydra has just written the job's .hydra/ record and opened its log: what of it this process
        created is noted, so that a refused run removes exactly that (core.ownership.record_made)."""
        from fedbench.core.ownership import HYDRA_FILES, record_made

        out = Path(str(config.hydra.runtime.output_dir))
        if config.hydra.output_subdir is not None:
            record = out / str(config.hydra.output_subdir)
            record_made(record)
            for name in HYDRA_FILES:
                record_made(record / name)
        record_made(out / f"{config.hydra.job.name}.log")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # One process creates the SQLite schema and the experiment, so that parallel jobs
        # do not race on MLflow's database migrations.
        from fedbench.tracking.store import open_store, probe_server, quiet_libraries, resolve_tracking_uri

        quiet_libraries()
        FAILURES.clear()
        uri = resolve_tracking_uri(config.tracking.get("uri"))
        probe_server(uri)
        # the sweep folder's one writer first: a relaunch while the first sweep runs is refused before it
        # touches the store that sweep is writing to (SQLite would make it wait, or fail "database is locked")
        own_folder(config, "hydra.sweep.dir", "sweep directory", resume=True)  # a relaunch continues its jobs
        open_store(uri, config.tracking.experiment)
        launcher = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
        global STOPPING  # the jobs run in worker processes: a signal is forwarded to them
        if "joblib" in launcher.lower():
            from fedbench.runs.interrupts import SweepStop, shield_joblib_workers

            shield_joblib_workers()
            STOPPING = SweepStop(Path(str(config.hydra.sweep.dir))).__enter__()
        elif launcher.endswith("hydra_ray_launcher.ray_launcher.RayLauncher"):
            from fedbench.runs.interrupts import SweepStop

            start_ray(config)  # first: ray.init sets its own SIGTERM handler, which would replace the forwarding
            STOPPING = SweepStop(Path(str(config.hydra.sweep.dir)), workers=list, remote=True).__enter__()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from fedbench.runs.single import mlflow_hint
        from fedbench.tracking.store import resolve_tracking_uri

        FAILURES.extend(collect_failures(Path(config.hydra.sweep.dir)))
        uri = resolve_tracking_uri(config.tracking.get("uri"))
        print(f"\nfedbench: sweep {config.hydra.sweep.dir}: open the runs with {mlflow_hint(uri)}\n"
              f"fedbench: its table: {report_command(config)}")


def start_ray(config: DictConfig) -> None:
    """Connect to Ray as Hydra's Ray launcher would (it then finds Ray started), with its default for
    object_store_memory (hydra_ray_launcher._core.launch)."""
    from hydra_plugins.hydra_ray_launcher._launcher_util import start_ray as hydra_start_ray

    init = OmegaConf.to_container(OmegaConf.select(config, "hydra.launcher.ray.init", default=None) or {},
                                  resolve=True)
    init.setdefault("object_store_memory", 78643200)
    hydra_start_ray(OmegaConf.create(init))


def collect_failures(sweep_dir: Path) -> list[str]:
    return [p.read_text().strip() for p in sorted(sweep_dir.glob(f"**/{FAILED_MARKER}"))]


# Every sweep whose grid holds a run, as `|<sweep folder>|<sweep folder>|`: a relaunched sweep skips the jobs
# that FINISHED (tracking.skip_finished), so their runs keep the `sweep_dir` of the sweep that trained them,
# and a filter on it would cover part of the grid; the relaunch adds itself here instead (runs.single.Job).
def shell_word(text: str) -> str:
    """`text` as one word of a shell command: in double quotes where none of them is special in it (the
    readable form), else as shlex quotes it."""
    import shlex

    return f'"{text}"' if not set(text) & set('"$`\\!') else shlex.quote(text)


def report_command(config: DictConfig) -> str:
    """The ready-to-paste `fedbench report` of every job of this sweep's grid (sweep_filter: the jobs it
    skipped as FINISHED included), with the first target of the config, and the first algorithm of the
    grid as the baseline when algorithms are swept."""
    import shlex

    sweep_dir = str(Path(config.hydra.sweep.dir).resolve())
    args = ["fedbench report --experiment", shlex.quote(str(config.tracking.experiment)),
            "--filter", shell_word(sweep_filter(sweep_dir))]
    if config.tracking.get("uri"):
        args += ["--uri", shlex.quote(str(config.tracking.uri))]
    targets = list(config.get("targets") or [])
    if targets:
        args += ["--target", f"{float(targets[0]):g}"]
        swept = [o.split("=", 1)[1] for o in config.hydra.overrides.task if o.split("=", 1)[0] == "algorithm"]
        first = swept[0].split(",")[0].strip() if swept else ""
        if swept and "," in swept[0] and first.replace("_", "").replace("/", "").isalnum():
            args += ["--baseline", first]
    return " ".join(args)
