"""`fedbench plot`: one's own comparison figure from MLflow runs, mean ± std over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

PLOT_EXAMPLES = """
Examples:

  fedbench plot --experiment fedbench                              # test accuracy per round, every setting

  fedbench plot --metric test_loss --x floats_up --output figs/loss   # figs/loss.png and figs/loss.pdf

  fedbench plot --filter "params.dataset.name = 'fmnist'" --setting partition.alpha
"""

DEFAULT_OUTPUT = Path("outputs/plots/comparison")


def plot(
    experiment: Annotated[str, typer.Option(help="MLflow experiment (tracking.experiment of the runs).")] = "fedbench",
    filter_string: Annotated[str, typer.Option("--filter", help="MLflow search filter, e.g. \"params.eta_l = '0.1'\".")] = "",
    metric: Annotated[str, typer.Option(help="The per-round metric on the y axis (test_accuracy, test_loss, train_loss, ...).")] = "test_accuracy",
    x: Annotated[str, typer.Option(help="The x axis: round | floats_up | floats_down | wall_time.")] = "round",
    setting: Annotated[list[str] | None, typer.Option(help="Param(s) that tell lines apart besides the method (repeatable); default: every run key that varies.")] = None,
    output: Annotated[Path, typer.Option(help="File stem: writes STEM.png and STEM.pdf (folders are created).")] = DEFAULT_OUTPUT,
    title: Annotated[str | None, typer.Option(help="The title (default: the setting all runs share).")] = None,
    uri: Annotated[str | None, typer.Option(help="Tracking URI (default: the local store, or MLFLOW_TRACKING_URI).")] = None,
) -> None:
    """A figure of one metric over rounds (or floats uploaded): one line per method and setting,
    the mean over seeds with a ± std band, PNG and PDF."""
    from fedbench.core.errors import ConfigError, unknown_choice
    from fedbench.core.output_files import check_output_file
    from fedbench.tracking.plots import X_AXES, save_figure
    from fedbench.tracking.report import comparison_plot

    if x not in X_AXES:
        raise unknown_choice("--x", x, X_AXES)
    if output.name in ("", ".", ".."):
        raise ConfigError(f"--output {str(output)!r} names no file: give a path and a name, e.g. figs/compare "
                          "(written as figs/compare.png and figs/compare.pdf)")
    for suffix in (".png", ".pdf"):
        check_output_file(output.with_suffix(suffix), "--output", create_folders=True)
    fig, count = comparison_plot(experiment, metric, x, setting, title, filter_string, uri)
    paths = save_figure(fig, output)
    typer.echo(f"wrote {', '.join(map(str, paths))} ({count} runs)", err=True)


def attach(root: typer.Typer) -> None:
    root.command("plot", epilog=PLOT_EXAMPLES)(plot)
