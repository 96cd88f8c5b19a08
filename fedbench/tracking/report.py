"""The papers' table shapes from a set of MLflow runs (`fedbench report`).

One row per algorithm x setting (by default every config key that differs between the runs): final
and best test accuracy and rounds to any target (from each run's history), mean and sample std over
seeds, and the speed-up in rounds over a baseline algorithm. With --best-by, each
algorithm x setting keeps only its best configuration (mean of the metric over seeds), the way
the papers report each method at its "optimal hyperparameters".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported by the functions that use it: `fedbench --help` stays fast
    import pandas as pd

# Params that say where or how a run executed, not what it computed.
PLACEMENT = ("tracking.", "engine.", "data.", "resume", "seed", "eval_every", "train_loss_every", "targets")

BEST_BY = ("final_accuracy", "best_accuracy", "final_loss")


def load_runs(uri: str | None, experiment: str, filter_string: str = "") -> pd.DataFrame:
    """One row per FINISHED run: params (as strings), tags and the metrics a table needs."""
    import pandas as pd

    from mlflow.tracking import MlflowClient

    from fedbench.core.errors import ConfigError
    from fedbench.tracking.store import existing_store, one_line

    store = existing_store(uri)
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
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "test_accuracy"))
        accs = [v for _, v in history]
        rows.append({
            "history": history,
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
    """Rounds to reach test accuracy >= target per run, from its recorded history (any target,
    declared before the runs or not); NaN where not reached."""
    return frame["history"].map(lambda h: next((float(r) for r, a in h if a >= target), float("nan")))


def mean_last(frame: pd.DataFrame, k: int) -> pd.Series:
    """Mean test accuracy over each run's last k recorded rounds (curves that swing round to round)."""
    return frame["history"].map(lambda h: sum(a for _, a in h[-k:]) / len(h[-k:]) if h else float("nan"))


# The params that name a method: the algorithm, and its server optimiser (FedAdam is FedAvg with
# algorithm.server_opt.name=adam): a method is never merged with another as a "tuned" choice.
METHOD_PARAMS = ("param:algorithm.name", "param:algorithm.server_opt.name")


def method_label(run) -> str:
    """fedavg, fedavg/adam, fedprox/momentum, ...: the algorithm and a server optimiser other than sgd."""
    import pandas as pd

    opt = run.get("param:algorithm.server_opt.name")
    name = str(run["param:algorithm.name"])
    return name if opt is None or pd.isna(opt) or opt == "sgd" else f"{name}/{opt}"


def differing_settings(frame: pd.DataFrame, exclude_tuned: bool) -> list[str]:
    """The config keys that differ between the runs (placement, seed and the algorithm aside): each
    combination is a row. With --best-by the tuned keys (algorithm.*, step sizes) are what is chosen
    per row, so they are not part of the setting."""
    tuned = ("algorithm.", "eta_l", "eta_g")
    keys = [c[6:] for c in hyperparameters(frame) if c not in METHOD_PARAMS]
    return [k for k in keys if not (exclude_tuned and k.startswith(tuned))]


def mean_std(values: pd.Series, digits: int) -> str:
    """Mean ± sample standard deviation over seeds; the mean alone for one seed."""
    values = values.dropna()
    if len(values) == 0:
        return "-"
    if len(values) == 1:
        return f"{values.iloc[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def hyperparameters(frame: pd.DataFrame) -> list[str]:
    """Params that vary across the runs and are not placement or seed."""
    cols = [c for c in frame if c.startswith("param:") and not c[6:].startswith(PLACEMENT)]
    return [c for c in cols if frame[c].nunique(dropna=False) > 1]


def _joined(frame: pd.DataFrame, columns: list[str]) -> pd.Series | str:
    """The values of `columns` per run as one string; '-' where a run lacks the param (an
    algorithm without that hyperparameter)."""
    import pandas as pd

    if not columns:
        return ""
    return frame[columns].apply(lambda row: " ".join("-" if pd.isna(v) else str(v) for v in row), axis=1)


def best_configs(frame: pd.DataFrame, keys: list[str], settings: list[str], metric: str) -> pd.DataFrame:
    """Keep, per algorithm x setting, the runs of its best configuration by the rule of tracking.best (the
    mean of `metric` over seeds; a rounds-to-target counts only when every seed reached it; ties broken by
    the mean of the last logged accuracies)."""
    from fedbench.tracking.best import TIE_BREAK_LAST, pick_best

    fixed = {*METHOD_PARAMS, *(f"param:{s}" for s in settings)}
    hp = [c for c in hyperparameters(frame) if c not in fixed]
    frame = frame.assign(config=_joined(frame, hp), _last=mean_last(frame, TIE_BREAK_LAST))
    higher = not (metric.startswith("rounds_to") or metric == "final_loss")
    groups = frame.groupby([*keys, "config"], dropna=False, sort=False)
    score = groups[metric].agg(lambda v: v.mean() if v.notna().all() else float("nan")).rename("score").to_frame()
    score["last"] = groups["_last"].mean()
    best = pick_best(score.reset_index(), keys, [("score", higher), ("last", True)])[[*keys, "config"]]
    kept = frame.merge(best, on=[*keys, "config"]).drop(columns="_last")
    kept["best config"] = kept[hp].apply(lambda r: " ".join(f"{c[6:]}={v}" for c, v in r.items()), axis=1) if hp else ""
    return kept


def build_table(frame: pd.DataFrame, settings: list[str] | None, target: float | None, baseline: str | None,
                best_by: str | None, last: int = 0) -> pd.DataFrame:
    """`settings` None: every config key that differs between the runs (differing_settings)."""
    import pandas as pd

    frame = frame.copy()
    if settings is None:
        settings = differing_settings(frame, exclude_tuned=best_by is not None)
    rounds = 0
    if target is not None:
        frame[f"rounds_to_{target:g}"] = rounds_to(frame, target)
        rounds = int(pd.to_numeric(frame["param:rounds"]).max())
    if last:
        frame[f"last_{last}_accuracy"] = mean_last(frame, last)
    frame["algorithm"] = frame.apply(method_label, axis=1)
    frame["setting"] = ""
    if settings:
        frame["setting"] = frame[[f"param:{s}" for s in settings]].apply(
            lambda row: " ".join(f"{s}={'-' if pd.isna(v) else v}" for s, v in zip(settings, row)), axis=1)
    keys = ["algorithm", "setting"]
    if best_by:
        frame = best_configs(frame, keys, settings, best_by)
    groups = frame.groupby(keys, dropna=False)
    table = groups.size().rename("seeds").to_frame()
    metrics = ["final_accuracy", "best_accuracy", *([f"last_{last}_accuracy"] if last else [])]
    for metric in metrics:
        table[metric] = groups[metric].agg(lambda v: mean_std(v, 4))
    if target is not None:
        col = f"rounds_to_{target:g}"

        def cell(v: pd.Series) -> str:
            reached = v.notna().sum()
            if reached == 0:
                return f">{rounds} (0/{len(v)})"
            return mean_std(v, 1) + ("" if reached == len(v) else f" ({reached}/{len(v)} reached)")

        table[col] = groups[col].agg(cell)
        mean = groups[col].agg(lambda v: v.mean() if v.notna().all() else float("nan"))  # all seeds reached
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
