"""The papers' table shapes from a set of MLflow runs (`fedbench report`).

One row per algorithm x setting (by default every config key that differs between the runs): final
and best test accuracy and rounds to any target (from each run's history), mean and sample std over
seeds, and the speed-up in rounds over a baseline algorithm. With --best-by, each
algorithm x setting keeps only its best configuration (mean of the metric over seeds), the way
the papers report each method at its "optimal hyperparameters".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedbench.core.values import is_number

if TYPE_CHECKING:  # pandas is imported by the functions that use it: `fedbench --help` stays fast
    import pandas as pd

# Params that say where or how a run executed, not what it computed.
PLACEMENT = ("tracking.", "engine.", "data.", "resume", "seed", "eval_every", "train_loss_every", "targets",
             "fedbench_version")

BEST_BY = ("final_accuracy", "best_accuracy", "final_loss")


def load_runs(uri: str | None, experiment: str, filter_string: str = "") -> pd.DataFrame:
    """One row per FINISHED run: params (as strings), tags and the metrics a table needs."""
    import pandas as pd

    from fedbench.core.errors import ConfigError, FedbenchError
    from fedbench.core.terminal import printable
    from fedbench.tracking.metric_rows import read_histories
    from fedbench.tracking.store import existing_store, one_line, reader_client

    store = existing_store(uri)  # as shown: no password
    try:
        client = reader_client(uri)  # an existing store, reached at once, never written
        exp = client.get_experiment_by_name(experiment)
        names = [e.name for e in client.search_experiments()] if exp is None else []
    except FedbenchError:
        raise
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
    others = [run for run in runs if "algorithm.name" not in run.data.params]  # a shared store: not fedbench's runs
    unlike = []  # fedbench's params, but a history no fedbench run records
    ours = [run for run in runs if "algorithm.name" in run.data.params]
    histories = read_histories(client, [run.info.run_id for run in ours], "test_accuracy")
    for run in ours:
        history = histories[run.info.run_id]
        if not recorded_history(history, run.data.params.get("rounds")) \
                or not all(is_number(run.data.metrics[k]) for k in ("test_accuracy", "test_loss") if k in run.data.metrics):
            unlike.append(run.info.run_id)
            continue
        history = sorted(history)
        accs = [v for _, v in history]
        rows.append({
            "history": history,
            # another person's text (a shared store): shown in tables, figures, pages and error lines as no
            # terminal acts on it (an escape in a run's param cleared the screen of whoever ran `report`)
            **{f"param:{k}": printable(v) for k, v in run.data.params.items()},
            **{f"tag:{k}": printable(v) for k, v in run.data.tags.items()},
            "run_id": run.info.run_id,
            "start_time": run.info.start_time,
            "final_accuracy": run.data.metrics.get("test_accuracy"),
            "best_accuracy": max(accs, default=None),
            "final_loss": run.data.metrics.get("test_loss"),
        })
    frame = one_run_per_config(pd.DataFrame(rows))
    frame.attrs["not_fedbench"] = len(others)  # what finished_runs says it left out
    frame.attrs["unlike_fedbench"] = unlike
    return frame


def recorded_history(history: list[tuple[int, float]], rounds: str | None) -> bool:
    """Whether a test-accuracy history is one a fedbench run records: at most one value a round, each round in
    1..rounds (the run's `rounds` param, where it has one), each value an accuracy in [0, 1]. A shared store may
    hold others (steps of 2**62 made a method reach its target in -4.6e18 rounds; a 1e308 accuracy a 309-digit cell)."""
    try:
        last = int(str(rounds)) if rounds is not None else None
    except ValueError:
        return False
    if not all(is_number(step, int) and is_number(value) for step, value in history):  # SQLite keeps text in a REAL column
        return False
    steps = [step for step, _ in history]
    return (len(set(steps)) == len(steps) and all(1 <= step and (last is None or step <= last) for step in steps)
            and all(0.0 <= value <= 1.0 for _, value in history))


def metric_curves(frame: pd.DataFrame, uri: str | None, metric: str, x: str = "round") -> pd.DataFrame:
    """Per run (frame's rows, labelled: algorithm, its own hyperparameters, setting) and round, `metric`
    against `x`: columns label, seed, x, metric (the input of tracking.plots.comparison_figure). Empty when no run logged it."""
    import pandas as pd

    from fedbench.tracking.metric_rows import read_histories
    from fedbench.tracking.store import reader_client

    client = reader_client(uri)
    run_ids = list(frame["run_id"])
    read = metric != "test_accuracy" or "history" not in frame
    histories = read_histories(client, run_ids, metric) if read else dict(zip(run_ids, frame["history"]))
    x_histories = read_histories(client, run_ids, x) if x != "round" else {}
    rows = []
    for _, run in frame.iterrows():
        values = dict(row for row in histories[run["run_id"]] if is_number(row[0], int) and is_number(row[1]))
        if not values:
            continue
        xs = ({r: v for r, v in x_histories[run["run_id"]] if is_number(r, int) and is_number(v)} if x != "round"
              else {r: float(r) for r in values})
        label = " ".join(p for p in (run["algorithm"], run.get("hyperparameters"), run["setting"]) if p)
        rows += [{"label": label, "seed": run.get("param:seed"), x: xs[r], metric: v} for r, v in values.items() if r in xs]
    return pd.DataFrame(rows, columns=["label", "seed", x, metric])


def logged_metrics(frame: pd.DataFrame, uri: str | None) -> list[str]:
    from fedbench.tracking.store import reader_client

    client = reader_client(uri)
    return sorted({k for r in frame["run_id"] for k in client.get_run(r).data.metrics})


def shared_heading(frame: pd.DataFrame) -> str:
    """What every run of the frame shares (data set, split, model, clients) as a figure's caption, e.g.
    `FMNIST, Dirichlet(0.3), MCLR, 10 of 20 clients` (tracking.plots.caption): a figure's default title."""
    from fedbench.tracking.plots import SKEW_KEYS, caption

    keys = ("dataset.name", "partition.name", *(f"partition.{k}" for k in SKEW_KEYS), "model.name", "num_clients",
            "clients_per_round")
    return caption({k: frame[f"param:{k}"].iloc[0] for k in keys
                    if f"param:{k}" in frame and frame[f"param:{k}"].nunique(dropna=False) == 1})


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


def _shown(value) -> str:
    import pandas as pd

    return "-" if value is None or pd.isna(value) else str(value)


def varies(column: pd.Series) -> bool:
    """Whether a param takes more than one value among the runs that have it: a key present in some runs
    only (a data set's constants, an algorithm's own option) with one value follows another choice."""
    return column.dropna().nunique() > 1


def method_labels(frame: pd.DataFrame, tuned: bool = False, settings: list[str] = ()) -> pd.Series:
    """Per run, the method it ran: method_label, plus the algorithm's own hyperparameters (algorithm.*)
    that vary among that method's runs, e.g. `fedprox (mu=0.1)`. With `tuned` (--best-by) those are
    what is chosen per row, so the label is the method alone; keys named as `settings` are not repeated."""
    base = frame.apply(method_label, axis=1) if len(frame) else frame.get("param:algorithm.name", [])
    if tuned or not len(frame):
        return base
    own = [c for c in frame if c.startswith("param:algorithm.") and c not in METHOD_PARAMS and c[6:] not in settings]
    labels = base.copy()
    for name, index in base.groupby(base).groups.items():
        runs = frame.loc[index]
        cols = [c for c in own if varies(runs[c])]
        if cols:
            labels[index] = name + " (" + runs[cols].apply(
                lambda row: ", ".join(f"{c.removeprefix('param:algorithm.')}={_shown(v)}" for c, v in row.items()),
                axis=1) + ")"
    return labels


def own_hyperparameters(frame: pd.DataFrame, settings: list[str] = ()) -> pd.Series:
    """Per run, the algorithm's own hyperparameters (algorithm.*: FedProx's mu, SCAFFOLD's option) that
    take one value among that method's runs, e.g. `mu=0.01 hetero_epochs=False`: what a reader of the
    table needs to know each method ran with. Those that vary are in the method's label (method_labels)
    or, with --best-by, its best config; a key unset (None) is left out."""
    import pandas as pd

    if not len(frame):
        return pd.Series([], dtype=str)
    base = frame.apply(method_label, axis=1)
    own = [c for c in frame if c.startswith("param:algorithm.") and c not in METHOD_PARAMS and c[6:] not in settings]
    shown = pd.Series("", index=frame.index)
    for index in base.groupby(base).groups.values():
        runs = frame.loc[index]
        fixed = [c for c in own if runs[c].notna().any() and not varies(runs[c])]
        shown[index] = runs[fixed].apply(
            lambda row: " ".join(f"{c.removeprefix('param:algorithm.')}={v}" for c, v in row.items()
                                 if pd.notna(v) and v != "None"), axis=1) if fixed else ""
    return shown


def differing_settings(frame: pd.DataFrame, exclude_tuned: bool) -> list[str]:
    """The run keys that vary across the compared runs: each combination is a setting, and a setting is
    shared by every method, so that methods compare on it. An algorithm's own keys (algorithm.*) are never
    a setting (they tell variants of a method apart, method_labels), nor a key with one value wherever it
    is present (a data set's constants). With --best-by the step sizes are what is chosen per row too."""
    tuned = ("eta_l", "eta_g")
    keys = [c[6:] for c in hyperparameters(frame) if c not in METHOD_PARAMS and not c.startswith("param:algorithm.")]
    return [k for k in keys if not (exclude_tuned and k.startswith(tuned))]


def recorded_keys(frame: pd.DataFrame) -> list[str]:
    return sorted(c[6:] for c in frame if c.startswith("param:"))


def check_settings(frame: pd.DataFrame, settings: list[str]) -> None:
    """A --setting that no run recorded is one line naming the keys that vary (the useful choices)."""
    from fedbench.core.errors import ConfigError, did_you_mean

    known = recorded_keys(frame)
    for key in settings:
        if key not in known:
            useful = differing_settings(frame, exclude_tuned=False)
            raise ConfigError(f"Unknown --setting {key!r}: no run records it. Keys that vary across these runs: "
                              f"{', '.join(useful) or '(none)'} (any recorded param may be named).{did_you_mean(key, known)}")


def mean_std(values: pd.Series, digits: int) -> str:
    """Mean ± sample standard deviation over seeds; the mean alone for one seed."""
    values = values.dropna()
    if len(values) == 0:
        return "-"
    if len(values) == 1:
        return f"{values.iloc[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def hyperparameters(frame: pd.DataFrame) -> list[str]:
    """Params that vary across the runs (varies) and are not placement or seed."""
    cols = [c for c in frame if c.startswith("param:") and not c[6:].startswith(PLACEMENT)]
    return [c for c in cols if varies(frame[c])]


def _joined(frame: pd.DataFrame, columns: list[str]) -> pd.Series | str:
    """The values of `columns` per run as one string; '-' where a run lacks the param (an
    algorithm without that hyperparameter)."""
    if not columns:
        return ""
    return frame[columns].apply(lambda row: " ".join(_shown(v) for v in row), axis=1)


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


def labelled(frame: pd.DataFrame, settings: list[str] | None, best_by: str | None) -> tuple[pd.DataFrame, list[str]]:
    """The runs with their `algorithm` (method_labels), `hyperparameters` (own_hyperparameters) and
    `setting` columns, and the setting keys used."""
    frame = frame.copy()
    if settings is None:
        settings = differing_settings(frame, exclude_tuned=best_by is not None)
    else:
        check_settings(frame, settings)
    frame["algorithm"] = method_labels(frame, tuned=best_by is not None, settings=settings)
    frame["hyperparameters"] = own_hyperparameters(frame, settings)
    frame["setting"] = ""
    if settings:
        frame["setting"] = frame[[f"param:{s}" for s in settings]].apply(
            lambda row: " ".join(f"{s}={_shown(v)}" for s, v in zip(settings, row)), axis=1)
    if best_by is None:
        check_not_pooled(frame, settings)
    return frame, settings


def check_not_pooled(frame: pd.DataFrame, settings: list[str]) -> None:
    """Runs of different configurations never share a row or a line as if they were seeds of one:
    --setting that leaves out a key that varies within a method is one line naming the keys to add."""
    from fedbench.core.errors import ConfigError

    groups = frame.groupby(["algorithm", "setting"], dropna=False)
    mixed = [c[6:] for c in hyperparameters(frame) if c not in METHOD_PARAMS and c[6:] not in settings
             and groups[c].agg(varies).any()]
    if mixed:
        raise ConfigError(f"--setting {' '.join(settings)} would pool runs that differ in {', '.join(mixed)} as if "
                          f"they were seeds of one configuration: add --setting {' --setting '.join(mixed)} "
                          "(or leave --setting out: every key that varies)")


def as_targets(target) -> list[float]:
    """--target as a list: None -> [], one value -> [it], several (repeated --target) -> each once, in order."""
    if target is None:
        return []
    values = [target] if isinstance(target, (int, float)) else list(target)
    return list(dict.fromkeys(float(t) for t in values))


def check_request(frame: pd.DataFrame, settings: list[str] | None, target, baseline: str | None,
                  best_by: str | None, last: int = 0) -> list[float]:
    """Every option of a table or figure checked against the runs, before any work: one line naming the
    bad value and the valid choices. `target`: None, one accuracy or several (a column each). Returns the
    targets (--best-by rounds_to_<t> implies one)."""
    from fedbench.core.errors import ConfigError, unknown_choice

    targets = as_targets(target)
    if best_by and best_by.startswith("rounds_to_") and not targets:
        try:
            targets = [float(best_by.removeprefix("rounds_to_"))]
        except ValueError:
            raise ConfigError(f"--best-by {best_by!r}: rounds_to_<t> needs a target accuracy t, e.g. rounds_to_0.8") from None
    if best_by and best_by not in BEST_BY and best_by not in [f"rounds_to_{t:g}" for t in targets]:
        raise unknown_choice("--best-by", best_by, (*BEST_BY, *([f"rounds_to_{t:g}" for t in targets] or ["rounds_to_<t>"])))
    if last < 0:
        raise ConfigError(f"--last must be >= 0 (0 = no such column), got {last}")
    for t in targets:
        if not 0 < t <= 1:
            raise ConfigError(f"--target must lie in (0, 1], got {t:g}")
    if baseline is not None and not targets:
        raise ConfigError(f"--baseline {baseline} is the speed-up in rounds to a target: give --target too, "
                          f"e.g. --target 0.8 --baseline {baseline}")
    if frame is None:
        return targets
    if settings:
        check_settings(frame, settings)
    if baseline is not None:
        choices = sorted(set(method_labels(frame, tuned=best_by is not None, settings=settings or ())))
        if baseline not in choices:
            raise unknown_choice("--baseline (a method of these runs)", baseline, choices)
    return targets


def speedup_column(baseline: str, target: float, targets: list[float], numeric: bool) -> str:
    """The speed-up column's name: `speed-up vs fedavg` (csv: speedup_vs_fedavg) for one target, the
    target added when there are several (`speed-up vs fedavg to 0.8`, speedup_vs_fedavg_to_0.8)."""
    name = f"speedup_vs_{baseline}" if numeric else f"speed-up vs {baseline}"
    if len(targets) > 1:
        name += f"_to_{target:g}" if numeric else f" to {target:g}"
    return name


def summarize(frame: pd.DataFrame, settings: list[str] | None, target, baseline: str | None,
              best_by: str | None, last: int = 0) -> pd.DataFrame:
    """The table in numbers, one row per method x setting: n runs (seeds), the method's own hyperparameters,
    per metric its mean and sample std over seeds; per target (`target`: None, one or several), the rounds to it (mean and std over the runs that reached it, how many
    reached it, and R, the rounds those runs had) and the speed-up in rounds over `baseline` (the ratio of
    the mean rounds, where every seed of both reached the target). `settings` None: differing_settings."""
    import pandas as pd

    targets = as_targets(target)
    frame, settings = labelled(frame, settings, best_by)
    for t in targets:
        frame[f"rounds_to_{t:g}"] = rounds_to(frame, t)
    if targets:
        frame["_rounds"] = pd.to_numeric(frame["param:rounds"], errors="coerce")
    if last:
        frame[f"last_{last}_accuracy"] = mean_last(frame, last)
    keys = ["algorithm", "setting"]
    if best_by:
        frame = best_configs(frame, keys, settings, best_by)
    groups = frame.groupby(keys, dropna=False)
    table = groups.size().rename("n").to_frame()
    for metric in ["final_accuracy", "best_accuracy", *([f"last_{last}_accuracy"] if last else [])]:
        table[f"{metric}_mean"] = groups[metric].mean()
        table[f"{metric}_std"] = groups[metric].std(ddof=1)
    for t in targets:
        col = f"rounds_to_{t:g}"
        table[f"{col}_mean"] = groups[col].mean()
        table[f"{col}_std"] = groups[col].std(ddof=1)
        table[f"{col}_reached"] = groups[col].count()
        if baseline is not None:
            every = groups[col].agg(lambda v: v.mean() if v.notna().all() else float("nan"))
            base = every.xs(baseline, level="algorithm") if baseline in every.index.get_level_values(0) else None
            table[speedup_column(baseline, t, targets, numeric=True)] = [
                float("nan") if base is None or setting not in base.index else base[setting] / m
                for (_, setting), m in every.items()]
    if targets:
        table["rounds"] = groups["_rounds"].max()  # each run's own budget (runs of one row share it)
    table["hyperparameters"] = groups["hyperparameters"].first()  # after the numbers: csv's columns stay put
    if best_by:
        table["best config"] = groups["best config"].first()
    return table.reset_index()


def format_table(stats: pd.DataFrame, target, baseline: str | None) -> pd.DataFrame:
    """summarize's numbers as the papers print them: `mean ± std` (the mean alone for one seed), rounds
    to each target with how many seeds reached it (`7.0 (1/2 reached)`, `>30 (0/3)`), speed-up `1.25x`.
    The methods' own hyperparameters in a column (where any method has some); the setting column only
    where runs differ in one."""
    import pandas as pd

    def cell(mean, std, digits: int) -> str:  # std is NaN for one value
        if pd.isna(mean):
            return "-"
        return f"{mean:.{digits}f}" if pd.isna(std) else f"{mean:.{digits}f} ± {std:.{digits}f}"

    targets = as_targets(target)
    shown = ["algorithm"]
    if "hyperparameters" in stats and (stats["hyperparameters"].fillna("") != "").any():
        shown.append("hyperparameters")
    if (stats["setting"].fillna("") != "").any():
        shown.append("setting")
    out = stats[shown].copy()
    out["seeds"] = stats["n"]
    for metric in [c.removesuffix("_mean") for c in stats if c.endswith("_accuracy_mean")]:
        out[metric] = [cell(m, s, 4) for m, s in zip(stats[f"{metric}_mean"], stats[f"{metric}_std"])]
    for t in targets:
        col = f"rounds_to_{t:g}"

        def rounds_cell(r, col: str = col) -> str:
            k, n = int(r[f"{col}_reached"]), int(r["n"])
            if k == 0:
                return f">{int(r['rounds'])} (0/{n})" if pd.notna(r["rounds"]) else f"- (0/{n})"
            text = cell(r[f"{col}_mean"], r[f"{col}_std"], 1)
            return text + ("" if k == n else f" ({k}/{n} reached)")

        out[col] = stats.apply(rounds_cell, axis=1)
        if baseline is not None:
            out[speedup_column(baseline, t, targets, numeric=False)] = stats[
                speedup_column(baseline, t, targets, numeric=True)].map(lambda v: "" if pd.isna(v) else f"{v:.2f}x")
    if "best config" in stats:
        out["best config"] = stats["best config"]
    return out


def build_table(frame: pd.DataFrame, settings: list[str] | None, target, baseline: str | None,
                best_by: str | None, last: int = 0) -> pd.DataFrame:
    """The formatted table (format_table of summarize)."""
    return format_table(summarize(frame, settings, target, baseline, best_by, last), target, baseline)


def markdown_cell(value: object) -> str:
    """`value` as one cell of a Markdown table: a `|` in a setting (`algorithm.name=a|b`) would start a
    new column and a line break a new row: pipes are escaped (after backslashes, which escape them) and lines joined."""
    return " ".join(str(value).replace("\\", "\\\\").replace("|", "\\|").splitlines())


def to_markdown(table: pd.DataFrame) -> str:
    cols = [markdown_cell(c) for c in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(markdown_cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def finished_runs(uri: str | None, experiment: str, filter_string: str = "") -> pd.DataFrame:
    """load_runs, refusing an empty selection in one line."""
    from fedbench.core.errors import ConfigError

    frame = load_runs(uri, experiment, filter_string)
    others, unlike = frame.attrs.get("not_fedbench", 0), frame.attrs.get("unlike_fedbench", [])
    notes = []  # what was left out: in the refusal of an empty selection, else a note each
    if others:
        notes.append(f"{others} FINISHED run(s) without the param algorithm.name, not recorded by fedbench, left out")
    if unlike:
        shown = ", ".join(unlike[:3]) + (f" and {len(unlike) - 3} more" if len(unlike) > 3 else "")
        notes.append(f"{len(unlike)} FINISHED run(s) whose test_accuracy no fedbench run records (a round outside "
                     f"1..rounds, twice, or a value outside [0, 1]), left out: {shown}")
    if frame.empty:
        raise ConfigError(f"no FINISHED fedbench runs in experiment {experiment!r}"
                          + (f" matching {filter_string!r}" if filter_string else "") + "".join(f" ({n})" for n in notes))
    if notes:
        import sys

        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    return frame


def report_table(experiment: str = "fedbench", target: float | list[float] | None = None, baseline: str | None = None,
                 settings: list[str] | None = None, best_by: str | None = None, last: int = 0, filter_string: str = "",
                 uri: str | None = None, numeric: bool = False) -> pd.DataFrame:
    """`fedbench report` as a DataFrame: formatted cells (mean ± std) or, `numeric`, summarize's numbers."""
    targets = check_request(None, settings, target, baseline, best_by, last)
    frame = finished_runs(uri, experiment, filter_string)
    check_request(frame, settings, targets, baseline, best_by, last)
    stats = summarize(frame, settings or None, targets, baseline, best_by, last)
    return stats if numeric else format_table(stats, targets, baseline)


def comparison_plot(experiment: str = "fedbench", metric: str = "test_accuracy", x: str = "round",
                    settings: list[str] | None = None, title: str | None = None, filter_string: str = "",
                    uri: str | None = None):
    """`fedbench plot` as a matplotlib Figure (and the number of runs drawn): one line per method and
    setting, the mean over seeds with a ± std band."""
    from fedbench.core.errors import unknown_choice
    from fedbench.tracking.plots import X_AXES, comparison_figure

    if x not in X_AXES:
        raise unknown_choice("--x", x, X_AXES)
    frame = finished_runs(uri, experiment, filter_string)
    if settings:
        check_settings(frame, settings)
    frame, _ = labelled(frame, settings or None, None)
    curves = metric_curves(frame, uri, metric, x)
    if curves.empty:
        raise unknown_choice("--metric (a metric these runs logged)", metric, logged_metrics(frame, uri))
    return comparison_figure(curves, metric, x, shared_heading(frame) if title is None else title), len(frame)


def to_latex(table: pd.DataFrame) -> str:
    """A booktabs table (\\toprule, \\midrule, \\bottomrule) for a paper, every cell escaped."""
    show = table.astype(str)
    styler = show.style.hide(axis="index").format(escape="latex").format_index(escape="latex", axis=1)
    text = styler.to_latex(hrules=True, column_format="l" * show.shape[1])
    return text.replace("±", r"$\pm$").replace(">", r"$>$")
