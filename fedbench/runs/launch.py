"""The batched launcher's work (hydra_plugins/fedbench_batched_launcher): set every job up as
Hydra's basic launcher would (its folder, saved config, HydraConfig), then train the jobs group by
group (runs.batched) and hand Hydra each job's objective."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from fedbench.runs.batched import GroupJob, describe_groups, run_group, split_groups
from fedbench.runs.hydra_app import HydraJob, current_job, interrupted_jobs, job_failed

log = logging.getLogger("fedbench.batched")


def compose_once(loader) -> None:
    """Hydra's sweeper composes every job of a batch to check it (validate_batch_is_legal), then the
    launcher composes it again to run it; in one process the second is the first's result. The
    loader keeps each job's config until the launcher takes it (a third request composes afresh).
    Jobs that choose the same config files are composed from one composition of them (SweepComposer)."""
    from fedbench.runs.sweep_compose import SweepComposer

    if getattr(loader, "_fedbench_compose_once", False):
        return
    compose = SweepComposer(loader.load_sweep_config)
    kept: dict[tuple[int, tuple[str, ...]], object] = {}

    def load_sweep_config(master_config, sweep_overrides):
        key = (id(master_config), tuple(sweep_overrides))
        if key in kept:
            return kept.pop(key)
        cfg = compose(master_config, list(sweep_overrides))
        kept[key] = cfg
        return cfg

    loader.load_sweep_config = load_sweep_config
    loader._fedbench_compose_once = True


def launch_batched(hydra_context, config, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                   max_batch: int = 0, ray: dict | None = None):
    """Set every job up, then train the groups here, or with `ray` ({address, num_cpus, max_retries}) each
    group as one Ray task on the cluster; Hydra gets each job's objective."""
    from hydra.core.utils import JobStatus, configure_log, filter_overrides, run_job, setup_globals
    from omegaconf import open_dict

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    jobs: list[HydraJob] = []

    def register(cfg) -> None:  # in the job's context: its folder exists and its config is saved
        jobs.append(current_job(cfg))

    returns = []
    for idx, overrides in enumerate(job_overrides):
        idx = initial_job_idx + idx
        sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = idx
            sweep_config.hydra.job.num = idx
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)  # the last job's logging set up its own
        log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        returns.append(run_job(hydra_context=hydra_context, task_function=register, config=sweep_config,
                               job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir"))
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    specs = [GroupJob(job.cfg, job.out, job.tags, job.label, job.log_file) for job in jobs]
    groups = split_groups(specs, max_batch)
    where = f" as Ray tasks on {ray['address']}" if ray else ""
    print(f"fedbench: batched launcher: {len(jobs)} job(s) in {len(groups)} group(s){where}", flush=True)
    for line in describe_groups(specs, groups):
        print(f"fedbench:   {line}", flush=True)
    grouped = [([jobs[i] for i in members], [specs[i] for i in members]) for members in groups]
    try:
        values = (on_ray(ray, grouped, Path(str(config.hydra.sweep.dir))) if ray
                  else [train_group(*group) for group in grouped])
    except KeyboardInterrupt as exc:  # every job named: the group's lanes checkpointed, later groups not started
        interrupted_jobs(jobs, exc)
    for members, group_values in zip(groups, values):
        for i, value in zip(members, group_values):
            returns[i].return_value = value
            returns[i].status = JobStatus.COMPLETED
    return returns


def train_group(jobs: list[HydraJob], specs: list[GroupJob]) -> list[float]:
    """Train one group (runs.batched.run_group); each job's objective, NaN for a failed one (reported, and
    marked in its folder for the sweep's end)."""
    from fedbench.runs.single import objective_value

    start = time.perf_counter()
    results = run_group(specs)  # an interrupt: launch_batched names every job
    print(f"fedbench: group of job(s) {', '.join(str(job.num) for job in jobs)}: {time.perf_counter() - start:.1f} s "
          "of wall-clock time (building, training, evaluating and recording its lanes; a lane's training time is "
          "its share of the rounds)", flush=True)
    return [job_failed(job, result) if isinstance(result, BaseException) else objective_value(result, job.cfg)
            for job, result in zip(jobs, results)]


def on_ray(ray_cfg: dict, grouped: list[tuple[list[HydraJob], list[GroupJob]]], sweep_dir: Path) -> list[list[float]]:
    """Each group as one Ray task (`num_cpus` each; retried `max_retries` times when its node dies, the jobs
    then continuing from their checkpoints in their MLflow runs, as a relaunched sweep does). A first SIGINT or
    SIGTERM reaches every task through the sweep's stop file (runs.interrupts.SweepStop, StopWatch): each
    checkpoints its lanes after their round, queued groups do not start, and launch_batched names every job;
    a second one stops at once."""
    import ray

    from fedbench.runs.interrupts import Interrupted, SweepStop

    if not ray.is_initialized():  # first: ray.init sets its own SIGTERM handler, which would replace SweepStop's
        ray.init(address=ray_cfg.get("address") or "auto", log_to_driver=True)
    task = ray.remote(num_cpus=ray_cfg.get("num_cpus", 1), max_retries=int(ray_cfg.get("max_retries", 3)))(group_task)
    with SweepStop(sweep_dir, workers=list, remote=True) as stop:
        values = ray.get([task.remote(stop.stop_file, jobs, specs) for jobs, specs in grouped])
    if stop.signum is not None:
        raise Interrupted(stop.signum)
    return values


def group_task(stop_file: Path, jobs: list[HydraJob], specs: list[GroupJob]) -> list[float] | None:
    """One group in a Ray task: trained while the parent's stop file allows; None once stopped (its lanes
    checkpointed after their round, or never started), the parent naming each job and its round."""
    from fedbench.runs.interrupts import StopWatch

    if stop_file.exists():  # queued when the sweep was stopped
        return None
    with StopWatch(stop_file):
        try:
            return train_group(jobs, specs)
        except KeyboardInterrupt:
            return None
