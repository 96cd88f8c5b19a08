"""`fedbench report`: tables from MLflow runs (tracking.report builds them)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from fedbench.tracking.report import BEST_BY, build_table, load_runs, method_label, to_markdown

REPORT_EXAMPLES = """
Examples:

  fedbench report --experiment fedbench --target 0.8 --baseline fedavg

  fedbench report --experiment tune --best-by final_accuracy --format csv --output best.csv

  fedbench report --filter "tags.sweep_dir LIKE '%04-10-00_%'" --setting dataset.name --setting partition.alpha
"""


class Format(str, Enum):
    markdown = "markdown"
    csv = "csv"


def report(
    experiment: Annotated[str, typer.Option(help="MLflow experiment (tracking.experiment of the runs).")] = "fedbench",
    filter_string: Annotated[str, typer.Option("--filter", help="MLflow search filter, e.g. \"tags.sweep_dir LIKE '%04-10%'\".")] = "",
    setting: Annotated[list[str] | None, typer.Option(help="Param(s) that make a setting (repeatable); default: every config key that differs between the runs.")] = None,
    target: Annotated[float | None, typer.Option(help="Accuracy target for the rounds-to-target column (any value: computed from each run's history).")] = None,
    last: Annotated[int, typer.Option(help="Add the mean test accuracy over each run's last K rounds.", metavar="K")] = 0,
    baseline: Annotated[str | None, typer.Option(help="Algorithm for the speed-up column (needs --target).")] = None,
    best_by: Annotated[str | None, typer.Option(help="Keep each algorithm's best config by this metric: final_accuracy | best_accuracy | final_loss | rounds_to_<t>.")] = None,
    fmt: Annotated[Format, typer.Option("--format", help="Output format.")] = Format.markdown,
    output: Annotated[Path | None, typer.Option(help="Write the table here instead of stdout.")] = None,
    uri: Annotated[str | None, typer.Option(help="Tracking URI (default: the local store, or MLFLOW_TRACKING_URI).")] = None,
) -> None:
    """Tables from MLflow runs: algorithm x setting, accuracy, rounds to target, mean ± std over seeds."""
    from fedbench.core.errors import ConfigError, check_output_file, unknown_choice

    if best_by and best_by.startswith("rounds_to_") and target is None:
        try:
            target = float(best_by.removeprefix("rounds_to_"))
        except ValueError:
            raise ConfigError(f"--best-by {best_by!r}: rounds_to_<t> needs a target accuracy t, e.g. rounds_to_0.8") from None
    if best_by and best_by not in BEST_BY and (target is None or best_by != f"rounds_to_{target:g}"):
        raise unknown_choice("--best-by", best_by, (*BEST_BY, "rounds_to_<t>"))
    if output is not None:
        check_output_file(output, "--output")
    frame = load_runs(uri, experiment, filter_string)
    if frame.empty:
        raise ConfigError(f"no FINISHED runs in experiment {experiment!r}" + (f" matching {filter_string!r}" if filter_string else ""))
    algorithms = sorted(set(frame.apply(method_label, axis=1)))
    if baseline is not None and baseline not in algorithms:
        raise unknown_choice("--baseline (an algorithm of these runs)", baseline, algorithms)
    if last < 0:
        raise ConfigError(f"--last must be >= 0 (0 = no such column), got {last}")
    if target is not None and not 0 < target <= 1:
        raise ConfigError(f"--target must lie in (0, 1], got {target}")
    table = build_table(frame, setting or None, target, baseline, best_by, last)
    text = table.to_csv(index=False) if fmt is Format.csv else to_markdown(table) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
        typer.echo(f"wrote {output} ({len(table)} rows from {len(frame)} runs)", err=True)


def attach(root: typer.Typer) -> None:
    root.command("report", epilog=REPORT_EXAMPLES)(report)
