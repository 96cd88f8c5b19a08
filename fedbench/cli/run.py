"""`fedbench run` (one run, or a grid with -m) and `fedbench resume`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedbench.config.compose import conf_dir

RUN_EXAMPLES = """
Examples:

  fedbench run                                   # offline default: FedAvg, digits, Dirichlet split

  fedbench run algorithm=fedavg dataset=fmnist partition=dirichlet partition.alpha=0.3

  fedbench run -m algorithm=fedavg,fedsgd seed=0,1,2     # Hydra multirun (grid)

  fedbench run --cfg job dataset=fmnist          # print the composed config and exit
"""

def top_level_keys_help() -> str:
    """`fedbench run --help`: the top-level keys of config.yaml with their defaults, and the groups."""
    from omegaconf import OmegaConf

    from fedbench.config.compose import bound_yaml

    path = conf_dir() / "config.yaml"
    if not path.is_file():
        return ""
    bound_yaml()  # FEDBENCH_CONF's config.yaml is a user's file, read when any command starts
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # a malformed config.yaml: the command itself reports it, in one line
        return ""
    groups = [f"{k}={v}" for d in raw.get("defaults", []) if isinstance(d, dict) for k, v in d.items()]
    keys = [f"{k}={v}" for k, v in raw.items() if k not in ("defaults", "hydra") and not isinstance(v, dict)]
    nested = [f"{k}.{j}={v}" for k, sub in raw.items() if k not in ("defaults", "hydra") and isinstance(sub, dict)
              for j, v in sub.items()]
    return ("\n\nTop-level keys and their defaults (conf/config.yaml):\n\n  " + "  ".join(keys + nested)
            + "\n\nGroups and their defaults (`fedbench list` shows the choices):\n\n  " + "  ".join(groups))


def run(
    ctx: typer.Context,
    multirun: Annotated[bool, typer.Option("-m", "--multirun", help="Run a Hydra multirun over comma-separated values.")] = False,
) -> None:
    """Run one experiment (or a grid with -m); OVERRIDES are Hydra overrides key=value.

    Hydra's own flags pass through: --cfg job prints the composed config, --info, --hydra-help.
    """
    argv = list(ctx.args) + (["--multirun"] if multirun else [])
    from fedbench.runs.hydra_app import hydra_main

    raise typer.Exit(hydra_main(argv))


RESUME_EXAMPLES = """
Examples:

  fedbench resume outputs/runs/2026-11-22/04-10-00_fedavg_digits_4121

  fedbench resume outputs/multirun/2026-11-22/04-10-00_4133/3  # one job of a sweep
"""


def resume(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (holds .hydra/ and checkpoint.pt).")],
    trust: Annotated[bool, typer.Option("--trust", help="Compose the folder's record (.hydra/overrides.yaml) though "
                                        "another user's or machine's fedbench wrote it: read it first, it can run code.")] = False,
) -> None:
    """Continue an interrupted run from its checkpoint: same config, same folder, same MLflow run."""
    from fedbench.core.errors import ConfigError
    from fedbench.core.ownership import check_entries
    from fedbench.runs.hydra_app import hydra_main
    from fedbench.runs.recorded import PLACEMENT, key_of, read_overrides, verify
    from fedbench.runs.single import CHECKPOINT_NAME

    check_entries(run_dir)  # the record is read through no link, no FIFO, before anything else
    saved = run_dir / ".hydra" / "overrides.yaml"
    if not saved.is_file():
        raise ConfigError(f"{run_dir} is not a fedbench run directory (no .hydra/overrides.yaml)")
    if not (run_dir / CHECKPOINT_NAME).is_file():
        why = ("started with tracking.checkpoint_every=0, it writes none but a stop signal's" if _checkpoints_off(run_dir)
               else "stopped before its first checkpoint")
        raise ConfigError(f"{run_dir} has no {CHECKPOINT_NAME} ({why}); start the run again")
    from fedbench.config.compose import quoted_override

    recorded = read_overrides(saved)
    conf, dirs = recorded_config_dirs(run_dir)
    verify(run_dir, run_dir / CHECKPOINT_NAME, recorded, conf, dirs, trust)  # composes only what the run recorded
    apply_config_dirs(conf)
    flags = [arg for d in dirs for arg in ("--config-dir", d)]
    overrides = _renamed(run_dir, [o for o in recorded if key_of(o) not in PLACEMENT], conf, dirs)
    # the folder as a quoted value: a path with `,` `=` `[` `]` spaces or quotes is one value of Hydra's grammar
    raise typer.Exit(hydra_main([*flags, *overrides, quoted_override("hydra.run.dir", str(run_dir.resolve())),
                                 "resume=true"]))


def _checkpoints_off(run_dir: Path) -> bool:
    """Whether the run's recorded config (.hydra/config.yaml) turned checkpoints off."""
    from fedbench.runs.recorded import read_yaml

    try:
        recorded = read_yaml(run_dir / ".hydra" / "config.yaml")
        return int(recorded["tracking"]["checkpoint_every"]) == 0
    except Exception:  # no such record, or not this layout: the usual reason stands
        return False


def recorded_config_dirs(run_dir: Path) -> tuple[str | None, list[str]]:
    """The config folders the run was started with (runs.hydra_app.record_config_dirs, or Hydra's own record of
    --config-dir for older folders), each checked to exist still."""
    from fedbench.core.errors import ConfigError
    from fedbench.runs.hydra_app import RECORD_NAME
    from fedbench.runs.recorded import read_yaml

    record = run_dir / ".hydra" / RECORD_NAME
    if record.is_file():
        saved = read_yaml(record)
    else:  # an older folder: Hydra's hydra.yaml lists the --config-dir among its config sources
        hydra_yaml = run_dir / ".hydra" / "hydra.yaml"
        hydra = read_yaml(hydra_yaml) if hydra_yaml.is_file() else {}
        try:
            sources = hydra["hydra"]["runtime"]["config_sources"] if hydra else []
            dirs = [s["path"] for s in sources if s["provider"] == "command-line" and s["schema"] == "file"]
        except (KeyError, TypeError):
            raise ConfigError(f"{hydra_yaml} is not Hydra's record of a run") from None
        saved = {"fedbench_conf": None, "config_dirs": dirs}
    if not isinstance(saved, dict):
        raise ConfigError(f"{record} is not the run's record of its config folders")
    conf, dirs = saved.get("fedbench_conf"), list(saved.get("config_dirs") or [])
    for path, origin in [(conf, "FEDBENCH_CONF"), *((d, "--config-dir") for d in dirs)]:
        if path and not Path(path).is_dir():
            raise ConfigError(f"{run_dir} was started with {origin} {path}, which no longer exists; restore that "
                              "folder to resume the run")
    return conf, dirs


def apply_config_dirs(conf: str | None) -> None:
    """FEDBENCH_CONF is set again (unless set now), for the jobs' own processes too."""
    import os

    from fedbench.config import compose

    if conf and not os.environ.get("FEDBENCH_CONF"):
        os.environ["FEDBENCH_CONF"] = conf
        compose.CONF_DIR = Path(conf)


def _renamed(run_dir: Path, overrides: list[str], conf: str | None, dirs: list[str]) -> list[str]:
    """A run folder recorded under renamed config choices (config.renames) continues under the new
    names: its overrides.yaml is rewritten, and its checkpoint re-keyed to the new config's hash when
    it was written by the recorded config (the same run: only names and key paths changed)."""
    from omegaconf import OmegaConf

    from fedbench.config.preflight import checked_compose
    from fedbench.config.renames import map_overrides
    from fedbench.engine.checkpoint import rehash_checkpoint
    from fedbench.runs.recorded import digest, read_overrides
    from fedbench.runs.single import CHECKPOINT_NAME, config_hash

    mapped = map_overrides(overrides)
    if mapped == overrides:
        return overrides
    recorded = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    saved = run_dir / ".hydra" / "overrides.yaml"
    kept = [o for o in read_overrides(saved) if o not in overrides]  # the placement entries
    rehash_checkpoint(run_dir / CHECKPOINT_NAME, config_hash(recorded), config_hash(checked_compose(mapped)),
                      digest([*kept, *mapped], conf, dirs))
    OmegaConf.save(OmegaConf.create([*kept, *mapped]), saved)
    changed = ", ".join(f"{a} -> {b}" for a, b in zip(overrides, mapped) if a != b)
    typer.echo(f"renamed since this run was recorded: {changed}", err=True)
    return mapped


def attach(root: typer.Typer) -> None:
    root.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                 epilog=RUN_EXAMPLES + top_level_keys_help())(run)
    root.command(epilog=RESUME_EXAMPLES)(resume)
