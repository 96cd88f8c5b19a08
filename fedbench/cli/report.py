"""`fedbench report`: tables from MLflow runs (tracking.report builds them)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

REPORT_EXAMPLES = """
Examples:

  fedbench report --experiment fedbench --target 0.8 --baseline fedavg

  fedbench report --target 0.75 --target 0.8          # a rounds-to-target column (and speed-up) per target

  fedbench report --experiment tune --best-by final_accuracy --format csv --output best.csv

  fedbench report --target 0.8 --format html --output results/page.html    # one page: table, curves, provenance

  fedbench report --filter "tags.sweep_dir LIKE '%04-10-00_%'" --setting dataset.name --setting partition.alpha
"""


class Format(str, Enum):
    markdown = "markdown"
    csv = "csv"
    latex = "latex"
    html = "html"


DEFAULT_PAGE = Path("outputs/report.html")


def report(
    experiment: Annotated[str, typer.Option(help="MLflow experiment (tracking.experiment of the runs).")] = "fedbench",
    filter_string: Annotated[str, typer.Option("--filter", help="MLflow search filter, e.g. \"tags.sweep_dir LIKE '%04-10%'\".")] = "",
    setting: Annotated[list[str] | None, typer.Option(help="Param(s) that make a setting (repeatable); default: every run key that varies across the runs (an algorithm's own keys tell its variants apart instead).")] = None,
    target: Annotated[list[float] | None, typer.Option(help="Accuracy target for a rounds-to-target column (any value: computed from each run's history); repeatable: a column per target.")] = None,
    last: Annotated[int, typer.Option(help="Add the mean test accuracy over each run's last K rounds.", metavar="K")] = 0,
    baseline: Annotated[str | None, typer.Option(help="Method for the speed-up column (needs --target).")] = None,
    best_by: Annotated[str | None, typer.Option(help="Keep each algorithm's best config by this metric: final_accuracy | best_accuracy | final_loss | rounds_to_<t>.")] = None,
    fmt: Annotated[Format, typer.Option("--format", help="markdown | csv (numbers: mean, std, n, reached) | latex (booktabs) | html (a self-contained page, default outputs/report.html).")] = Format.markdown,
    output: Annotated[Path | None, typer.Option(help="Write here instead of stdout (folders are created).")] = None,
    uri: Annotated[str | None, typer.Option(help="Tracking URI (default: the local store, or MLFLOW_TRACKING_URI).")] = None,
) -> None:
    """Tables from MLflow runs: method x setting, accuracy, rounds to target, mean ± std over seeds."""
    from fedbench.core.output_files import check_output_file, write_output
    from fedbench.tracking import report as tables

    if fmt is Format.html and output is None:
        output = DEFAULT_PAGE
    targets = tables.check_request(None, setting, target, baseline, best_by, last)
    if output is not None:
        check_output_file(output, "--output", create_folders=True)
    frame = tables.finished_runs(uri, experiment, filter_string)
    tables.check_request(frame, setting, targets, baseline, best_by, last)
    stats = tables.summarize(frame, setting or None, targets, baseline, best_by, last)
    table = tables.format_table(stats, targets, baseline)
    if fmt is Format.html:
        from fedbench.tracking.page import report_page

        labelled, keys = tables.labelled(frame, setting or None, best_by)
        report_page(output, labelled, table, keys, experiment, filter_string, uri, " ".join(["fedbench", *sys.argv[1:]]))
        typer.echo(f"wrote {output} ({len(table)} rows from {len(frame)} runs; opens from disk in any browser)", err=True)
        return
    text = {Format.csv: lambda: stats.to_csv(index=False), Format.latex: lambda: tables.to_latex(table),
            Format.markdown: lambda: tables.to_markdown(table) + "\n"}[fmt]()
    if output is None:
        typer.echo(text, nl=False)
    else:
        from fedbench.core.secrets import redact

        write_output(output, redact(text), "--output")
        typer.echo(f"wrote {output} ({len(table)} rows from {len(frame)} runs)", err=True)


def attach(root: typer.Typer) -> None:
    root.command("report", epilog=REPORT_EXAMPLES)(report)
