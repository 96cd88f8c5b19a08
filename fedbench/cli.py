"""The `fedbench` command: run (Hydra, multirun included), resume, list, version."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from fedbench import __version__
from fedbench.errors import FedbenchError
from fedbench.report import REPORT_EXAMPLES, report
from fedbench.tracking.plot_cli import PLOT_EXAMPLES, plot
from fedbench.reproduce.cli import app as reproduce_app

CONF_DIR = Path(os.environ.get("FEDBENCH_CONF", Path(__file__).resolve().parent / "conf"))


def register_resolvers() -> None:
    """`${pid:}` in hydra.run.dir: runs started in the same second get folders of their own."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("pid"):
        OmegaConf.register_new_resolver("pid", os.getpid)


register_resolvers()

RUN_EXAMPLES = """
Examples:

  fedbench run                                   # offline default: FedAvg, digits, Dirichlet split

  fedbench run algorithm=fedavg dataset=fmnist partition=dirichlet partition.alpha=0.3

  fedbench run -m algorithm=fedavg,fedsgd seed=0,1,2     # Hydra multirun (grid)

  fedbench run --cfg job dataset=fmnist          # print the composed config and exit
"""

HYDRA_FLAGS = """Hydra flags that `fedbench run` passes through:
  --cfg,-c job|hydra|all   show the config instead of running (--resolve: resolve interpolations)
  --package,-p PKG         the config package to show
  --multirun,-m            run a grid with the configured launcher and sweeper
  --config-dir,-cd DIR     add a folder of your own config groups
  --info,-i                all|config|defaults|defaults-tree|plugins|searchpath
  key=value                override a config value (dots for nested keys: partition.alpha=0.3)
`fedbench list` shows the choices of every config group."""


def top_level_keys_help() -> str:
    """`fedbench run --help`: the top-level keys of config.yaml with their defaults, and the groups."""
    from omegaconf import OmegaConf

    path = CONF_DIR / "config.yaml"
    if not path.is_file():
        return ""
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    groups = [f"{k}={v}" for d in raw.get("defaults", []) if isinstance(d, dict) for k, v in d.items()]
    keys = [f"{k}={v}" for k, v in raw.items() if k not in ("defaults", "hydra") and not isinstance(v, dict)]
    nested = [f"{k}.{j}={v}" for k, sub in raw.items() if k not in ("defaults", "hydra") and isinstance(sub, dict)
              for j, v in sub.items()]
    return ("\n\nTop-level keys and their defaults (fedbench/conf/config.yaml):\n\n  " + "  ".join(keys + nested)
            + "\n\nGroups and their defaults (`fedbench list` shows the choices):\n\n  " + "  ".join(groups))


app = typer.Typer(
    name="fedbench",
    help="Federated-optimization benchmark: batched-client engine, paper algorithms, MLflow record.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.add_typer(__import__("fedbench.data_cli", fromlist=["app"]).app, name="data")


app.add_typer(reproduce_app, name="reproduce")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fedbench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """fedbench: run federated-optimization experiments from Hydra configs."""


def _report_error(exc: FedbenchError) -> None:
    if os.environ.get("FEDBENCH_DEBUG"):
        import traceback

        traceback.print_exc()
    typer.echo(f"error: {exc}", err=True)


def _hydra_task(cfg) -> float:
    """One Hydra job; returns the sweep objective (tracking.objective; NaN for a failed job)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from fedbench.runner import objective_value, run_job
    from fedbench.multirun import FAILED_MARKER

    from omegaconf import OmegaConf

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    out = Path(hc.runtime.output_dir)
    # the overrides as typed: `rounds=${oops} rounds=1` is a valid command (the last value wins),
    # and reading its first item as config would resolve ${oops}
    typed = " ".join(OmegaConf.to_container(hc.overrides.task, resolve=False))
    tags = {"overrides": typed[:5000]}
    if multirun:
        tags.update(sweep_dir=str(Path(hc.sweep.dir).resolve()), sweep_job=str(hc.job.num))
    marker = out / FAILED_MARKER
    marker.unlink(missing_ok=True)
    try:
        label = f"job {hc.job.num}" if multirun else ""
        summary = run_job(cfg, out, tags=tags, sweep=multirun, label=label, log_file=out / f"{hc.job.name}.log")
    except KeyboardInterrupt:
        typer.echo(f"error: interrupted; the checkpoint of the last whole round is in {out}; "
                   f"continue with: fedbench resume {out}", err=True)
        raise SystemExit(130) from None
    except Exception as exc:
        if isinstance(exc, FedbenchError):
            _report_error(exc)
            if not multirun:
                if exc.exit_code == 2 and not cfg.get("resume"):
                    _discard_untrained(out)
                raise SystemExit(exc.exit_code) from None
        elif not multirun:
            raise
        else:  # a bug: show it, but let the other jobs of the grid run
            import traceback

            traceback.print_exc()
        # the parent process reads these markers (jobs may run in other processes: joblib, Ray)
        marker.write_text(f"job {hc.job.num} ({typed}): {exc}\n")
        return float("nan")
    return objective_value(summary, cfg)


def _discard_untrained(run_dir: Path) -> None:
    """A run refused before its first round leaves no folder behind (only Hydra's own files were written)."""
    import shutil

    from fedbench.runner import CHECKPOINT_NAME

    if not run_dir.is_dir() or (run_dir / CHECKPOINT_NAME).exists():
        return
    entries = list(run_dir.iterdir())
    if all(e.name == ".hydra" or (e.suffix == ".log" and e.is_file()) for e in entries):  # never a user's files
        for e in entries:
            shutil.rmtree(e) if e.is_dir() else e.unlink()
        run_dir.rmdir()


def hydra_main(argv: list[str]) -> int:
    """Hand `argv` to Hydra as if it were the command line; returns the exit code."""
    import hydra

    from fedbench import multirun as sweep
    from fedbench.preflight import preflight

    from fedbench.errors import ConfigError

    if not (CONF_DIR / "config.yaml").is_file():
        origin = "FEDBENCH_CONF" if os.environ.get("FEDBENCH_CONF") else "the installed package"
        raise ConfigError(f"no config.yaml in the config directory {CONF_DIR} (from {origin}); point FEDBENCH_CONF "
                          "at a copy of fedbench/conf, or unset it to use the packaged configs")
    if "--hydra-help" in argv:  # Hydra's own text advertises a shell completion that `fedbench run` cannot offer
        typer.echo(HYDRA_FLAGS)
        return 0
    if any(a in ("-sc", "--shell-completion") or a.startswith("--shell-completion=") for a in argv):
        raise ConfigError("shell completion is not available for fedbench run: Hydra's completion script expects "
                          "a standalone program; `fedbench list` shows every choice")
    for flag, value in zip(argv, argv[1:]):
        if flag in ("--config-dir", "-cd") and not Path(value).is_dir():
            raise ConfigError(f"{flag} {value}: no such folder (it adds config groups, e.g. my_conf/algorithm/x.yaml)")
    if not any(a in ("--help", "-h", "--hydra-help", "--info", "-i") for a in argv):
        preflight(CONF_DIR, argv)
    decorated = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)(_hydra_task)
    saved = sys.argv
    sys.argv = ["fedbench", *argv]
    sweep.FAILURES.clear()
    try:
        decorated()
    finally:
        sys.argv = saved
    if sweep.FAILURES:
        typer.echo(f"{len(sweep.FAILURES)} job(s) failed:\n  " + "\n  ".join(sweep.FAILURES), err=True)
        return 1
    return 0


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog=RUN_EXAMPLES + top_level_keys_help(),
)
def run(
    ctx: typer.Context,
    multirun: Annotated[bool, typer.Option("-m", "--multirun", help="Run a Hydra multirun over comma-separated values.")] = False,
) -> None:
    """Run one experiment (or a grid with -m); OVERRIDES are Hydra overrides key=value.

    Hydra's own flags pass through: --cfg job prints the composed config, --info, --hydra-help.
    """
    argv = list(ctx.args) + (["--multirun"] if multirun else [])
    raise typer.Exit(hydra_main(argv))


RESUME_EXAMPLES = """
Examples:

  fedbench resume outputs/runs/2026-11-22/04-10-00_fedavg_digits_4121

  fedbench resume outputs/multirun/2026-11-22/04-10-00/3       # one job of a sweep
"""


@app.command(epilog=RESUME_EXAMPLES)
def resume(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (holds .hydra/ and checkpoint.pt).")],
) -> None:
    """Continue an interrupted run from its checkpoint: same config, same folder, same MLflow run."""
    from omegaconf import OmegaConf

    from fedbench.errors import ConfigError
    from fedbench.runner import CHECKPOINT_NAME

    saved = run_dir / ".hydra" / "overrides.yaml"
    if not saved.is_file():
        raise ConfigError(f"{run_dir} is not a fedbench run directory (no .hydra/overrides.yaml)")
    if not (run_dir / CHECKPOINT_NAME).is_file():
        raise ConfigError(f"{run_dir} has no {CHECKPOINT_NAME} (stopped before its first checkpoint); "
                          "start the run again")
    placement = ("resume", "hydra.run.dir")
    overrides = [o for o in OmegaConf.load(saved) if o.lstrip("+~").split("=", 1)[0] not in placement]
    raise typer.Exit(hydra_main([*overrides, f"hydra.run.dir={run_dir.resolve()}", "resume=true"]))


app.command("report", epilog=REPORT_EXAMPLES)(report)
app.command("plot", epilog=PLOT_EXAMPLES)(plot)


@app.command("list")
def list_choices() -> None:
    """List the available algorithms, data sets, partitions and models, one line each."""
    from fedbench.registry import declared  # the registrations read from source: no torch import

    for title, group in (("algorithms", "algorithm"), ("datasets", "dataset"), ("partitions", "partition"), ("models", "model")):
        typer.echo(f"{title}:")
        described = declared(group)
        for name, doc in described.items():
            if title == "datasets" and name == "fmnist":
                from fedbench.data.locations import fmnist_folder

                found = fmnist_folder()
                doc += f" [found: {found}]" if found else " [not found: apt-get install dataset-fashion-mnist]"
            typer.echo(f"  {name:<16} {doc}")
            if title == "algorithms" and (imposed := imposed_settings(CONF_DIR / "algorithm" / f"{name}.yaml")):
                shown = ', '.join(f"{k}={'null' if v is None else v}" for k, v in imposed.items())
                typer.echo(f"  {'':<16}   imposes: {shown}")
        variants = _variants(group, list(described))
        if variants:
            typer.echo(f"{group} variants ({group}=<file>: a registered {group} with other defaults):")
            for stem, name, comment in variants:
                typer.echo(f"  {stem:<16} -> {name}: {comment[:100]}")
    presets = sorted(str(p.relative_to(CONF_DIR / "experiment").with_suffix(""))
                     for p in (CONF_DIR / "experiment").rglob("*.yaml"))
    typer.echo("experiments (experiment=<name>: a paper's setting; fedbench reproduce list shows the claims):")
    for i in range(0, len(presets), 5):
        typer.echo("  " + "  ".join(f"{p:<22}" for p in presets[i:i + 5]).rstrip())


def _variants(group: str, registered: list[str]) -> list[tuple[str, str, str]]:
    """Config files of a group that are not a registered name: (file, the registered name it selects,
    its first comment line)."""
    import yaml

    out = []
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        if path.stem in registered:
            continue
        raw = yaml.safe_load(path.read_text()) or {}
        name = (raw.get("algorithm") or {}).get("name") if group == "algorithm" and "algorithm" in raw else raw.get("name")
        base = next((d for d in raw.get("defaults", []) if isinstance(d, str) and d != "_self_"), None)
        name = name or base  # a variant that extends a sibling file (losac_paper: defaults [losac])
        comment = next((ln.lstrip("# ").strip() for ln in path.read_text().splitlines()
                        if ln.startswith("#") and "@package" not in ln), "")
        out.append((path.stem, str(name), comment))
    return out


def imposed_settings(path: Path) -> dict[str, str]:
    """The run settings an algorithm's config file imposes (`algorithm.imposes`), with their values:
    top-level keys of the file, or group choices from its defaults list."""
    import yaml  # plain YAML (interpolations stay text): cheaper than OmegaConf for `fedbench list`

    if not path.is_file():
        return {}
    raw = yaml.safe_load(path.read_text()) or {}
    keys = (raw.get("algorithm") or {}).get("imposes") or []
    choices = {}
    for entry in raw.get("defaults") or []:
        if isinstance(entry, dict):
            for k, v in entry.items():
                choices[k.removeprefix("override ").lstrip("/")] = v
    return {k: raw[k] if k in raw else choices.get(k) for k in keys}


def _register_subcommands() -> None:
    from fedbench.attacks.cli import app as attack_app

    app.add_typer(attack_app, name="attack")


_register_subcommands()


def entrypoint() -> None:
    try:
        app()
    except FedbenchError as exc:
        _report_error(exc)
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    entrypoint()
