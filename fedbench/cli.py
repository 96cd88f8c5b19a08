"""The `fedbench` command: run (Hydra, multirun included), list, version."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from fedbench import __version__
from fedbench.errors import FedbenchError
from fedbench.reproduce.cli import app as reproduce_app

CONF_DIR = Path(os.environ.get("FEDBENCH_CONF", Path(__file__).resolve().parent.parent / "conf"))

RUN_EXAMPLES = """
Examples:

  fedbench run                                   # offline default: FedAvg, digits, Dirichlet split

  fedbench run algorithm=fedavg dataset=fmnist partition=dirichlet partition.alpha=0.3

  fedbench run -m algorithm=fedavg,fedsgd seed=0,1,2     # Hydra multirun (grid)

  fedbench run --cfg job dataset=fmnist          # print the composed config and exit
"""

app = typer.Typer(
    name="fedbench",
    help="Federated-optimization benchmark: batched-client engine, paper algorithms, MLflow record.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.add_typer(__import__("fedbench.data_cli", fromlist=["app"]).app, name="data")

_failures: list[str] = []


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


def _hydra_task(cfg) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from fedbench.runner import run_job

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    try:
        run_job(cfg, Path(hc.runtime.output_dir))
    except FedbenchError as exc:
        _report_error(exc)
        if not multirun:
            raise SystemExit(exc.exit_code) from None
        _failures.append(f"job {hc.job.num} ({' '.join(hc.overrides.task)}): {exc}")


def hydra_main(argv: list[str]) -> int:
    """Hand `argv` to Hydra as if it were the command line; returns the exit code."""
    import hydra

    from fedbench.preflight import preflight

    if not any(a in ("--help", "-h", "--hydra-help", "--info", "-i") for a in argv):
        preflight(CONF_DIR, argv)
    decorated = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)(_hydra_task)
    saved = sys.argv
    sys.argv = ["fedbench", *argv]
    _failures.clear()
    try:
        decorated()
    finally:
        sys.argv = saved
    if _failures:
        typer.echo(f"{len(_failures)} job(s) failed:\n  " + "\n  ".join(_failures), err=True)
        return 1
    return 0


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog=RUN_EXAMPLES,
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


@app.command("list")
def list_choices() -> None:
    """List the available algorithms, data sets, partitions and models, one line each."""
    from fedbench.algorithms import load_all
    from fedbench.data import DATASETS, PARTITIONS
    from fedbench.models import MODELS

    for title, registry in (
        ("algorithms", load_all()),
        ("datasets", DATASETS),
        ("partitions", PARTITIONS),
        ("models", MODELS),
    ):
        typer.echo(f"{title}:")
        for name, doc in registry.describe().items():
            typer.echo(f"  {name:<16} {doc}")


def entrypoint() -> None:
    try:
        app()
    except FedbenchError as exc:
        _report_error(exc)
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    entrypoint()
