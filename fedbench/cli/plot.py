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

X_AXES = ("round", "floats_up", "floats_down", "wall_time")
DEFAULT_OUTPUT = Path("outputs/plots/comparison")


def _value(v) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else str(v)


def plot(
    experiment: Annotated[str, typer.Option(help="MLflow experiment (tracking.experiment of the runs).")] = "fedbench",
    filter_string: Annotated[str, typer.Option("--filter", help="MLflow search filter, e.g. \"params.eta_l = '0.1'\".")] = "",
    metric: Annotated[str, typer.Option(help="The per-round metric on the y axis (test_accuracy, test_loss, train_loss, ...).")] = "test_accuracy",
    x: Annotated[str, typer.Option(help="The x axis: round | floats_up | floats_down | wall_time.")] = "round",
    setting: Annotated[list[str] | None, typer.Option(help="Param(s) that tell lines apart besides the algorithm (repeatable); default: every config key that differs.")] = None,
    output: Annotated[Path, typer.Option(help="File stem: writes STEM.png and STEM.pdf.")] = DEFAULT_OUTPUT,
    title: Annotated[str | None, typer.Option(help="The title (default: the setting all runs share).")] = None,
    uri: Annotated[str | None, typer.Option(help="Tracking URI (default: the local store, or MLFLOW_TRACKING_URI).")] = None,
) -> None:
    """A figure of one metric over rounds (or floats uploaded): one line per algorithm and setting,
    the mean over seeds with a ± std band, PNG and PDF."""
    import pandas as pd

    from fedbench.core.errors import ConfigError, check_output_file, unknown_choice
    from fedbench.tracking.report import differing_settings, hyperparameters, load_runs, method_label
    from fedbench.tracking.plots import plot_comparison

    if x not in X_AXES:
        raise unknown_choice("--x", x, X_AXES)
    if output == DEFAULT_OUTPUT:
        output.parent.mkdir(parents=True, exist_ok=True)
    check_output_file(output.with_suffix(".png"), "--output")
    frame = load_runs(uri, experiment, filter_string)
    if frame.empty:
        raise ConfigError(f"no FINISHED runs in experiment {experiment!r}" + (f" matching {filter_string!r}" if filter_string else ""))
    from mlflow.tracking import MlflowClient

    from fedbench.tracking.store import existing_store

    client = MlflowClient(existing_store(uri))
    keys = setting if setting else differing_settings(frame, exclude_tuned=False)
    rows = []
    for _, run in frame.iterrows():
        values = {m.step: m.value for m in client.get_metric_history(run["run_id"], metric)}
        if not values:
            continue
        xs = ({m.step: m.value for m in client.get_metric_history(run["run_id"], x)} if x != "round"
              else {r: float(r) for r in values})
        label = " ".join([method_label(run), *(f"{k}={_value(run.get(f'param:{k}'))}" for k in keys)])
        rows += [{"label": label, "seed": run.get("param:seed"), x: xs[r], metric: v} for r, v in values.items() if r in xs]
    if not rows:
        known = sorted({k for r in frame["run_id"] for k in client.get_run(r).data.metrics})
        raise unknown_choice("--metric (a metric these runs logged)", metric, known)
    shared = [c[6:] for c in frame if c.startswith("param:") and c not in hyperparameters(frame)
              and c[6:] in ("dataset.name", "partition.name", "partition.alpha", "model.name", "num_clients",
                            "clients_per_round")]
    heading = title or ", ".join(f"{k}={frame[f'param:{k}'].iloc[0]}" for k in shared)
    paths = plot_comparison(pd.DataFrame(rows), metric, x, heading, output)
    typer.echo(f"wrote {', '.join(map(str, paths))} ({frame.shape[0]} runs)", err=True)


def attach(root: typer.Typer) -> None:
    root.command("plot", epilog=PLOT_EXAMPLES)(plot)
