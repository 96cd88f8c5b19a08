"""The `fedbench` command. Every sub-command lives in a module of this package with an
`attach(root)` that adds it to the root command; heavy imports wait until a command runs, so
`fedbench --help` and `fedbench list` start without torch."""

from __future__ import annotations

from typing import Annotated

import typer

from fedbench import __version__
from fedbench.cli import attack, data, listing, plot, report, reproduce, run
from fedbench.core.errors import FedbenchError, report_error

app = typer.Typer(
    name="fedbench",
    help="Federated-optimization benchmark: batched-client engine, paper algorithms, MLflow record.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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


for _module in (run, listing, data, reproduce, attack, report, plot):  # the order of `fedbench --help`
    _module.attach(app)


def entrypoint() -> None:
    try:
        app()
    except FedbenchError as exc:
        report_error(exc)
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    entrypoint()
