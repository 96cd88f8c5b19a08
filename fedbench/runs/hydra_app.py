"""`fedbench run` through Hydra: a command line (sweeps, launchers, sweepers included) -> jobs,
each trained by runs.single. The CLI, the Python API and the reproductions all come through here
or through runs.single directly."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fedbench.config.compose import checked_conf_dir, register_resolvers
from fedbench.core.errors import FedbenchError, report_error
from fedbench.core.terminal import printable

HYDRA_FLAGS = """Hydra flags that `fedbench run` passes through:
  --cfg,-c job|hydra|all   show the config instead of running (--resolve: resolve interpolations)
  --package,-p PKG         the config package to show
  --multirun,-m            run a grid with the configured launcher and sweeper
  --config-dir,-cd DIR     add a folder of your own config groups
  --info,-i                all|config|defaults|defaults-tree|plugins|searchpath
  key=value                override a config value (dots for nested keys: partition.alpha=0.3)
`fedbench list` shows the choices of every config group."""


# Flags of a command line that trains no single run: no MLflow writer is started for it.
NO_RUN_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--multirun", "-m", "-sc",
                "--shell-completion")


@dataclass
class HydraJob:
    """A Hydra job's place: its output folder, labels and tags (read from HydraConfig in the job)."""

    cfg: object
    out: Path
    multirun: bool
    num: int
    name: str
    typed: str  # the overrides as typed
    tags: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"job {self.num}" if self.multirun else ""

    @property
    def log_file(self) -> Path:
        return self.out / f"{self.name}.log"


def current_job(cfg) -> HydraJob:
    """The running Hydra job; clears a FAILED marker a previous attempt left in its folder."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from fedbench.engine.checkpoint import RECORD_DIGEST
    from fedbench.runs.callbacks import FAILED_MARKER
    from fedbench.runs.recorded import digest

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    # the overrides as typed: `rounds=${oops} rounds=1` is a valid command (the last value wins),
    # and reading its first item as config would resolve ${oops}
    typed = " ".join(OmegaConf.to_container(hc.overrides.task, resolve=False))
    num = hc.job.num if multirun else 0  # unset outside a multirun
    job = HydraJob(cfg, Path(hc.runtime.output_dir), multirun, num, hc.job.name, typed, {"overrides": typed[:5000]})
    if multirun:
        job.tags.update(sweep_dir=str(Path(hc.sweep.dir).resolve()), sweep_job=str(hc.job.num))
    if (job.out / ".hydra" / RECORD_NAME).is_file():  # an earlier job of fedbench's here: its markers are stale
        for marker in (FAILED_MARKER, INTERRUPTED_MARKER):  # (a folder of the user's keeps files of these names)
            if (job.out / marker).is_file() and not (job.out / marker).is_symlink():
                (job.out / marker).unlink(missing_ok=True)
    conf, dirs = record_config_dirs(job.out, hc)
    overrides = OmegaConf.to_container(hc.overrides.task, resolve=False)
    if (recorded := digest(overrides, conf, dirs)) is not None:  # into each checkpoint: what resume may compose
        job.tags[RECORD_DIGEST] = recorded
    return job


RECORD_NAME = "fedbench.yaml"  # in the run folder's .hydra/, beside Hydra's own files


def record_config_dirs(out: Path, hc) -> tuple[str | None, list[str]]:
    """The config folders this run composes from (FEDBENCH_CONF, --config-dir), for `fedbench resume`;
    returns them as recorded."""
    dirs = [s.path for s in hc.runtime.config_sources if s.provider == "command-line" and s.schema == "file"]
    if hc.output_subdir is None:
        return fedbench_conf(), dirs
    return write_config_record(out / str(hc.output_subdir), dirs)


def fedbench_conf() -> str | None:
    conf = os.environ.get("FEDBENCH_CONF")
    return str(Path(conf).absolute()) if conf else None


def write_config_record(hydra_dir: Path, dirs: list[str]) -> tuple[str | None, list[str]]:
    """RECORD_NAME in a run's .hydra/ folder: FEDBENCH_CONF and the config folders `dirs`; returns them."""
    from omegaconf import OmegaConf

    from fedbench.core.ownership import record_made

    conf, path = fedbench_conf(), hydra_dir / RECORD_NAME
    existed = path.exists()
    OmegaConf.save(OmegaConf.create({"fedbench_conf": conf, "config_dirs": dirs}), path)
    if not existed:
        record_made(path)
    return conf, dirs


def install_hydra_redaction() -> None:
    """Hydra writes .hydra/{config,hydra,overrides}.yaml itself (hydra.core.utils._save_config); every
    one goes through `redact_tree` first, whatever channel a secret came in by (a --config-dir file,
    FEDBENCH_CONF, an override). Idempotent; wraps whatever writer is installed."""
    import hydra.core.utils as hydra_utils
    from omegaconf import OmegaConf

    from fedbench.core.secrets import redact_tree

    save = hydra_utils._save_config
    if getattr(save, "redacting", False):
        return

    def redacting_save(cfg, filename, output_dir):
        plain = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
        redacted = redact_tree(plain)
        # nothing masked (a grid's every job, as a rule): the config itself, whose YAML is the same text, not
        # one made of the tree (~20 ms of a grid's job for its three files)
        return save(cfg if redacted == plain else OmegaConf.create(redacted), filename, output_dir)

    redacting_save.redacting = True
    hydra_utils._save_config = redacting_save


def _hydra_task(cfg) -> float:
    """One Hydra job; returns the sweep objective (tracking.objective; NaN for a failed job)."""
    from fedbench.core.secrets import install
    from fedbench.runs.interrupts import STOP_NAME, StopWatch, arm_worker, in_ray_task, sweep_stop_file

    install()  # a launcher's worker process prints and logs too
    if in_ray_task():  # Hydra's Ray launcher: the parent's stop comes through the stop file in the sweep folder
        from hydra.core.hydra_config import HydraConfig

        stop = Path(str(HydraConfig.get().sweep.dir)).absolute() / STOP_NAME
        if stop.exists():  # queued when the sweep was stopped
            return stopped(current_job(cfg), "not started")
        with StopWatch(stop):
            return _run(cfg, current_job(cfg), worker=True)
    stop = sweep_stop_file()  # in a joblib worker: the parent's stop, if it was asked
    if stop is not None:
        arm_worker(True)
    try:
        job = current_job(cfg)
        if stop is not None and stop.exists():  # queued when the sweep was stopped
            return stopped(job, "not started")
        return _run(cfg, job, worker=stop is not None)
    finally:
        if stop is not None:
            arm_worker(False)


def _run(cfg, job: HydraJob, worker: bool) -> float:
    from fedbench.runs.interrupts import received

    try:
        from fedbench.runs.single import objective_value, run_job  # torch's import: a signal may come in it

        summary = run_job(cfg, job.out, tags=job.tags, sweep=job.multirun, label=job.label, log_file=job.log_file)
    except KeyboardInterrupt as exc:
        return interrupted(job, exc, worker)
    except Exception as exc:
        if (interrupt := received()) is not None:  # an error the signal caused
            return interrupted(job, interrupt, worker)
        return job_failed(job, exc)
    return objective_value(summary, cfg)


INTERRUPTED_MARKER = "INTERRUPTED"  # a sweep job's folder: where its run stopped, for the parent's report


def interrupted(job: HydraJob, exc: BaseException, worker: bool = False) -> float:
    """Ctrl-C or SIGTERM: say what was saved (a checkpoint, or nothing yet) and exit 128 + the signal; a job
    in a sweep's worker process leaves its marker for the parent's report instead, and returns NaN."""
    from fedbench.runs.interrupts import describe, exit_code, signal_of
    from fedbench.runs.single import next_step

    if worker:
        return stopped(job, stopped_where(job.out))
    print(f"error: interrupted ({describe(signal_of(exc))}); {next_step(job.out)}", file=sys.stderr, flush=True)
    raise SystemExit(exit_code(exc)) from None


def stopped(job: HydraJob, where: str) -> float:
    from fedbench.core.ownership import record_made

    marker = job.out / INTERRUPTED_MARKER
    marker.write_text(f"job {job.num} ({job.typed}): {where}\n")
    record_made(marker)
    return float("nan")


def stopped_where(run_dir: Path) -> str:
    """Where an interrupted job's run stopped: the round of its checkpoint, and how to continue it."""
    from fedbench.core.ownership import CHECKPOINT_NAME, shell_path
    from fedbench.engine.checkpoint import read_payload

    try:
        round_ = read_payload(run_dir / CHECKPOINT_NAME)["round"]
    except (FedbenchError, KeyError):  # none (yet), or not readable
        return "stopped before its first checkpoint; nothing was checkpointed"
    return f"stopped at round {round_}; continue with: fedbench resume {shell_path(run_dir)}"


def interrupted_jobs(jobs: list[HydraJob], exc: BaseException):
    """A sweep stopped by a signal: one line, then where each of its jobs stopped; exit 128 + the signal."""
    from fedbench.runs.interrupts import exit_code, signal_of

    report_stopped([f"job {job.num} ({job.typed}): {stopped_where(job.out)}" for job in jobs], signal_of(exc))
    raise SystemExit(exit_code(exc)) from None


def report_stopped(lines: list[str], signum: int) -> None:
    from fedbench.runs.interrupts import report_where_stopped

    report_where_stopped(signum, "job of the sweep", "fedbench resume continues one; the same command again continues "
                         "them all, skipping finished ones", lines)


def job_failed(job: HydraJob, exc: Exception) -> float:
    """Report a failed job: one line for ours (exit at once outside a sweep), a traceback for a bug;
    in a sweep the other jobs go on and the failure is left as a marker in the job's folder. A job whose
    folder another live process owns stops the sweep too (exit 2): a sweep relaunched while the first
    still runs would run the first one's jobs a second time."""
    from fedbench.core.ownership import FolderBusy
    from fedbench.runs.callbacks import FAILED_MARKER

    if isinstance(exc, FedbenchError):
        report_error(exc)
        if not job.multirun or isinstance(exc, FolderBusy):
            if exc.before_work and not job.multirun and not job.cfg.get("resume"):
                _discard_untrained(job.out)
            raise SystemExit(exc.exit_code) from None
    elif not job.multirun:
        raise exc
    else:  # a bug: show it, but let the other jobs of the grid run
        import traceback

        traceback.print_exception(exc)
    # the parent process reads these markers (jobs may run in other processes: joblib, Ray)
    (job.out / FAILED_MARKER).write_text(f"job {job.num} ({job.typed}): {exc}\n")
    return float("nan")


def _discard_untrained(run_dir: Path) -> None:
    """A run refused before its first round leaves behind nothing it made (Hydra's .hydra/ and log, the
    folder itself when it created it); what the folder held before stays (core.ownership)."""
    from fedbench.core.ownership import discard_made

    discard_made(run_dir)


def sweep_stopped(exc: BaseException | None) -> int:
    """A joblib sweep stopped by a signal (runs.callbacks.STOPPING): where each job stopped, from the markers its
    worker left; the exit code 128 + the signal."""
    from fedbench.runs import callbacks
    from fedbench.runs.interrupts import left_behind

    stop = callbacks.STOPPING
    signum = stop.signum
    folder = stop.stop_file.parent
    lines = [p.read_text().strip() for p in sorted(folder.glob(f"*/{INTERRUPTED_MARKER}"),
                                                   key=lambda p: (len(p.parent.name), p.parent.name))]
    if exc is not None:
        lines.append("(stopped again: the jobs still running stopped at once, each at its last periodic checkpoint)")
    report_stopped(lines or [left_behind()], signum)
    return 128 + signum


def hydra_main(argv: list[str]) -> int:
    """Hand `argv` to Hydra as if it were the command line; returns the exit code."""
    import hydra

    from fedbench.runs import callbacks as sweep
    from fedbench.config.preflight import preflight
    from fedbench.tracking import writer

    from fedbench.core.errors import ConfigError
    from fedbench.core.secrets import install, withhold

    install()
    install_hydra_redaction()  # .hydra/ holds no secret, whichever channel brought it (a config file too)
    argv = withhold(argv)  # before Hydra: its config, .hydra/ and the record never hold the password
    CONF_DIR = checked_conf_dir()
    register_resolvers()
    if "--hydra-help" in argv:  # Hydra's own text advertises a shell completion that `fedbench run` cannot offer
        print(HYDRA_FLAGS)
        return 0
    if any(a in ("-sc", "--shell-completion") or a.startswith("--shell-completion=") for a in argv):
        raise ConfigError("shell completion is not available for fedbench run: Hydra's completion script expects "
                          "a standalone program; `fedbench list` shows every choice")
    for flag, value in zip(argv, argv[1:]):
        if flag in ("--config-dir", "-cd") and not Path(value).is_dir():
            raise ConfigError(f"{flag} {value}: no such folder (it adds config groups, e.g. my_conf/algorithm/x.yaml)")
    if not any(a.split("=")[0] in NO_RUN_FLAGS for a in argv):
        writer.prestart()  # MLflow's import and store in a process of their own, beside this one's torch
    try:
        if not any(a in ("--help", "-h", "--hydra-help", "--info", "-i") for a in argv):
            preflight(CONF_DIR, argv)
        decorated = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)(_hydra_task)
        saved = sys.argv
        sys.argv = ["fedbench", *argv]
        sweep.FAILURES.clear()
        try:
            decorated()
        except KeyboardInterrupt as exc:
            if sweep.STOPPING is None or sweep.STOPPING.signum is None:
                raise
            return sweep_stopped(exc)  # a second signal: the workers stopped at once
        finally:
            sys.argv = saved
        if sweep.STOPPING is not None and sweep.STOPPING.signum is not None:
            return sweep_stopped(None)
    finally:
        writer.discard()  # one no run took
        sweep.release_folders()
    if sweep.FAILURES:
        print(f"{len(sweep.FAILURES)} job(s) failed:\n  " + "\n  ".join(map(printable, sweep.FAILURES)), file=sys.stderr)
        return 1
    return 0


