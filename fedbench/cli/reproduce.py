"""`fedbench reproduce`: list the reproductions, or run one and compare it with its paper."""

from __future__ import annotations

from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from fedbench.core.errors import ConfigError


class _OneCommandGroup(TyperGroup):
    """A sub-app whose callback takes every argument (NAME, --scale, Hydra overrides): no subcommands."""

    allow_interspersed_args = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return click.Command.parse_args(self, ctx, args)

    def format_usage(self, ctx: click.Context, formatter) -> None:
        formatter.write_usage(ctx.command_path, "NAME [--scale ci|full|<scale>] [--seeds 0-4] [HYDRA_OVERRIDES]...")


app = typer.Typer(cls=_OneCommandGroup,
                  help="Reproduce the papers' tables and figures and compare with the published numbers.")

EPILOG = """
Examples:

  fedbench reproduce list                         # every table/figure, its claim and what it needs

  fedbench reproduce losac/fig7 --scale ci        # scaled-down run (minutes on a CPU)

  fedbench reproduce all --scale ci               # every reproduction that can run here, and a summary

  fedbench reproduce losac/fig6 --scale ci --seeds 0-4   # other seeds than the scale's (a range, a list: 0,3,7)

  fedbench reproduce composite/fig2 --scale full --jobs 2 --record engine.threads=1   # seeds 2 at a time; record this entry

  fedbench reproduce fedadmm/table3 --scale full tracking.uri=http://host:5000
"""


def tuned(scale) -> str:
    if scale.tune is None:
        return ""
    return f" (every method tuned over {len(next(iter(scale.tune.grid.values())))} candidates)"


def list_reproductions() -> None:
    from fedbench.reproduce.catalog import load_catalog
    from fedbench.reproduce.results import measured_compute
    from fedbench.reproduce.run import missing

    for rep in load_catalog().values():
        typer.echo(f"{rep.name:<22} {rep.title}")
        typer.echo(f"{'':<22} claim: {rep.claim}")
        for name, sc in rep.scales.items():
            needs = ", ".join(sc.data) if sc.data else "no files (synthetic / bundled data)"
            lacking = missing(rep, name)
            state = f"   [missing here: {', '.join(lacking)}]" if lacking else ""
            compute = measured_compute(rep.name, name) or f"estimate {sc.compute}"
            typer.echo(f"{'':<22} {name:<4}: {sc.device.upper()}, {compute}; data: {needs}; "
                       f"{len(sc.runs)} arms x {len(sc.seeds)} seeds{tuned(sc)}{state}")
        typer.echo("")


@app.callback(invoke_without_command=True, context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
              epilog=EPILOG)
def reproduce(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="a reproduction (<paper>/<table>), `all`, or `list`")],
    scale: Annotated[str, typer.Option("--scale", help="ci (scaled down, CPU minutes), full (the paper's settings) or an entry's own (fedbench reproduce list)")] = "ci",
    record: Annotated[bool, typer.Option("--record", help="record the claims, the compute taken and the command as the "
                                         "catalog's results and docs/results.md/.html of a source checkout: each entry "
                                         "that ran replaces its own record, every other entry keeps its own")] = False,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="worker processes (1 = one after the other). With an entry: "
                                      "its lane groups (seeds with their own data) train this many at once, every run "
                                      "recorded in the one MLflow store, results as with 1. With `all`: entries run this "
                                      "many at once, each recording into its own MLflow store "
                                      "outputs/reproduce/<entry>/mlflow.db unless tracking.uri is given")] = 1,
    seeds: Annotated[str | None, typer.Option("--seeds", help="the reproduction's seeds instead of the scale's: a range "
                                              "(0-4), a list (0,3,7) or both (0-2,7); seed=... is refused")] = None,
) -> None:
    """Run NAME's grid (seeds included) into the MLflow experiment NAME, print and save the comparison with
    the paper; exit code 1 when a claim does not hold. Extra arguments are Hydra overrides for every job."""
    from fedbench.core.secrets import withhold
    from fedbench.reproduce.run import parse_seeds

    chosen = parse_seeds(seeds) if seeds is not None else None

    if name == "list":
        if record:
            raise ConfigError("--record records a reproduction's outcome: give an entry (fedbench reproduce list) or `all`")
        list_reproductions()
        return
    if name == "all":
        from fedbench.reproduce.run import reproduce_all

        results, summary = reproduce_all(scale, tuple(withhold(ctx.args)), echo=typer.echo, record=record, jobs=jobs,
                                         seeds=chosen)
        typer.echo("\n" + summary.read_text())
        typer.echo(f"saved: {summary}")
        if any(not isinstance(r, str) and not r.holds for r in results.values()):
            typer.echo("a claim does not hold", err=True)
            raise typer.Exit(1)
        return
    from fedbench.reproduce.catalog import get
    from fedbench.reproduce.run import reproduce as run_reproduction, reproduce_and_record

    if record:
        outcome = reproduce_and_record(get(name), scale, tuple(withhold(ctx.args)), seeds=chosen, jobs=jobs, echo=typer.echo)
    else:
        outcome = run_reproduction(get(name), scale, tuple(withhold(ctx.args)), seeds=chosen, jobs=jobs)
    typer.echo("\n" + outcome.markdown)
    typer.echo("\nsaved: " + ", ".join(str(p) for p in outcome.files))
    if not outcome.holds:
        typer.echo("a claim does not hold", err=True)
        raise typer.Exit(1)


def attach(root: typer.Typer) -> None:
    root.add_typer(app, name="reproduce")
