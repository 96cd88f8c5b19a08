"""`fedbench report`: the papers' table shapes from a set of MLflow runs.

One row per algorithm x setting: final and best test accuracy and rounds to target, mean and std
over seeds, and the speed-up in rounds over a baseline algorithm. With --best-by, each
algorithm x setting keeps only its best configuration (mean of the metric over seeds), the way
the papers report each method at its "optimal hyperparameters".
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

# Params that say where or how a run executed, not what it computed.
PLACEMENT = ("tracking.", "engine.", "data.", "resume", "seed", "eval_every", "train_loss_every", "targets")

REPORT_EXAMPLES = """
Examples:

  fedbench report --experiment fedbench --target 0.8 --baseline fedavg

  fedbench report --experiment tune --best-by final_accuracy --format csv --output best.csv

  fedbench report --filter "tags.sweep_dir LIKE '%04-10-00'" --setting dataset.name --setting partition.alpha
"""


BEST_BY = ("final_accuracy", "best_accuracy", "final_loss")


class Format(str, Enum):
    markdown = "markdown"
    csv = "csv"


def load_runs(uri: str | None, experiment: str, filter_string: str = "") -> pd.DataFrame:
    """One row per FINISHED run: params (as strings), tags and the metrics a table needs."""
    from mlflow.tracking import MlflowClient

    from fedbench.errors import ConfigError
    from fedbench.tracking.store import resolve_tracking_uri

    from fedbench.tracking.store import one_line

    store = resolve_tracking_uri(uri)
    try:
        client = MlflowClient(store)
        exp = client.get_experiment_by_name(experiment)
        names = [e.name for e in client.search_experiments()] if exp is None else []
    except Exception as exc:  # not an MLflow store, unreachable server
        raise ConfigError(f"cannot read the MLflow store {store}: {one_line(exc)}") from None
    if exp is None:
        raise ConfigError(f"no MLflow experiment {experiment!r}. Available: {', '.join(names) or '(none)'}")
    query = " and ".join(f for f in ("attributes.status = 'FINISHED'", filter_string) if f)
    try:
        runs = client.search_runs([exp.experiment_id], filter_string=query, max_results=50000)
    except Exception as exc:
        raise ConfigError(f"--filter {filter_string!r} is not a valid MLflow search filter: {one_line(exc)} "
                          "(e.g. \"tags.sweep_dir LIKE '%04-10%'\" or \"params.eta_l = '0.1'\")") from None
    rows = []
    for run in runs:
        accs = [m.value for m in client.get_metric_history(run.info.run_id, "test_accuracy")]
        rows.append({
            **{f"param:{k}": v for k, v in run.data.params.items()},
            **{f"tag:{k}": v for k, v in run.data.tags.items()},
            "run_id": run.info.run_id,
            "start_time": run.info.start_time,
            "final_accuracy": run.data.metrics.get("test_accuracy"),
            "best_accuracy": max(accs, default=None),
            "final_loss": run.data.metrics.get("test_loss"),
        })
    return one_run_per_config(pd.DataFrame(rows))


def one_run_per_config(frame: pd.DataFrame) -> pd.DataFrame:
    """A configuration (seed included) that FINISHED more than once, e.g. re-run with
    tracking.skip_finished=false, counts once: its newest run."""
    if frame.empty or "tag:config_hash" not in frame:
        return frame
    newest = frame.sort_values("start_time", ascending=False)
    unique = newest[newest["tag:config_hash"].isna() | ~newest.duplicated("tag:config_hash")]
    return unique.sort_values("start_time").reset_index(drop=True)


def rounds_to(frame: pd.DataFrame, target: float) -> pd.Series:
    """Rounds to target per run; NaN where not reached (tag '>R')."""
    col = f"tag:rounds_to_{target:g}"
    if col not in frame:
        raise typer.BadParameter(f"no run has a rounds_to_{target:g} tag; add {target:g} to the runs' targets")
    return pd.to_numeric(frame[col], errors="coerce")


def hyperparameters(frame: pd.DataFrame) -> list[str]:
    """Params that vary across the runs and are not placement or seed."""
    cols = [c for c in frame if c.startswith("param:") and not c[6:].startswith(PLACEMENT)]
    return [c for c in cols if frame[c].nunique(dropna=False) > 1]


def _joined(frame: pd.DataFrame, columns: list[str]) -> pd.Series | str:
    """The values of `columns` per run as one string; '-' where a run lacks the param (an
    algorithm without that hyperparameter)."""
    if not columns:
        return ""
    return frame[columns].apply(lambda row: " ".join("-" if pd.isna(v) else str(v) for v in row), axis=1)


def best_configs(frame: pd.DataFrame, keys: list[str], settings: list[str], metric: str) -> pd.DataFrame:
    """Keep, per algorithm x setting, the runs of the configuration with the best mean `metric`."""
    fixed = {"param:algorithm.name", *(f"param:{s}" for s in settings)}
    hp = [c for c in hyperparameters(frame) if c not in fixed]
    frame = frame.assign(config=_joined(frame, hp))
    higher = not (metric.startswith("rounds_to") or metric == "final_loss")
    score = frame.groupby([*keys, "config"], dropna=False)[metric].mean().reset_index()
    score = score.sort_values(metric, ascending=not higher, na_position="last")
    best = score.drop_duplicates(keys)[[*keys, "config"]]
    kept = frame.merge(best, on=[*keys, "config"])
    kept["best config"] = kept[hp].apply(lambda r: " ".join(f"{c[6:]}={v}" for c, v in r.items()), axis=1) if hp else ""
    return kept


def build_table(frame: pd.DataFrame, settings: list[str], target: float | None, baseline: str | None,
                best_by: str | None) -> pd.DataFrame:
    frame = frame.copy()
    rounds = 0
    if target is not None:
        frame[f"rounds_to_{target:g}"] = rounds_to(frame, target)
        rounds = pd.to_numeric(frame["param:rounds"]).max()
    frame["algorithm"] = frame["param:algorithm.name"]
    frame["setting"] = _joined(frame, [f"param:{s}" for s in settings])
    keys = ["algorithm", "setting"]
    if best_by:
        frame = best_configs(frame, keys, settings, best_by)
    groups = frame.groupby(keys, dropna=False)
    table = groups.size().rename("seeds").to_frame()
    for metric in ("final_accuracy", "best_accuracy"):
        table[metric] = groups[metric].agg(lambda s: f"{s.mean():.4f} ± {s.std(ddof=0):.4f}")
    if target is not None:
        col = f"rounds_to_{target:g}"
        mean = groups[col].agg(lambda s: s.mean() if s.notna().all() else float("nan"))
        table[col] = [f">{int(rounds)}" if pd.isna(m) else f"{m:.1f} ± {frame.loc[g.index, col].std(ddof=0):.1f}"
                      for m, (_, g) in zip(mean, groups)]
        if baseline is not None:
            base = mean.xs(baseline, level="algorithm") if baseline in mean.index.get_level_values(0) else None
            table[f"speed-up vs {baseline}"] = [
                "" if base is None or setting not in base.index or pd.isna(m) or pd.isna(base[setting])
                else f"{base[setting] / m:.2f}x" for (alg, setting), m in mean.items()
            ]
    if best_by:
        table["best config"] = groups["best config"].first()
    return table.reset_index()


def to_markdown(table: pd.DataFrame) -> str:
    cols = [str(c) for c in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def report(
    experiment: Annotated[str, typer.Option(help="MLflow experiment (tracking.experiment of the runs).")] = "fedbench",
    filter_string: Annotated[str, typer.Option("--filter", help="MLflow search filter, e.g. \"tags.sweep_dir LIKE '%04-10%'\".")] = "",
    setting: Annotated[list[str], typer.Option(help="Param(s) that make a setting (repeatable).")] = ["dataset.name", "partition.name"],  # noqa: B006
    target: Annotated[float | None, typer.Option(help="Accuracy target for the rounds-to-target column.")] = None,
    baseline: Annotated[str | None, typer.Option(help="Algorithm for the speed-up column (needs --target).")] = None,
    best_by: Annotated[str | None, typer.Option(help="Keep each algorithm's best config by this metric: final_accuracy | best_accuracy | final_loss | rounds_to_<t>.")] = None,
    fmt: Annotated[Format, typer.Option("--format", help="Output format.")] = Format.markdown,
    output: Annotated[Path | None, typer.Option(help="Write the table here instead of stdout.")] = None,
    uri: Annotated[str | None, typer.Option(help="Tracking URI (default: the local store, or MLFLOW_TRACKING_URI).")] = None,
) -> None:
    """Tables from MLflow runs: algorithm x setting, accuracy, rounds to target, mean ± std over seeds."""
    from fedbench.errors import ConfigError, check_output_file, unknown_choice

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
    algorithms = sorted(frame["param:algorithm.name"].dropna().unique())
    if baseline is not None and baseline not in algorithms:
        raise unknown_choice("--baseline (an algorithm of these runs)", baseline, algorithms)
    table = build_table(frame, setting, target, baseline, best_by)
    text = table.to_csv(index=False) if fmt is Format.csv else to_markdown(table) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
        typer.echo(f"wrote {output} ({len(table)} rows from {len(frame)} runs)", err=True)
