"""Measured vs published: per-run metrics, the mean/std over seeds, speed-ups, the comparison table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fedbench.reproduce.entry import Claim, Metric, Reproduction, Scale

NOT_REACHED = ("-", "–", "100+", "never")
Logged = tuple[np.ndarray, np.ndarray] | None  # a history's column as logged(): (rounds, values)


@dataclass
class RunResult:
    """One finished run: its arm, seed, round budget and per-round history (a `round` column)."""

    method: str
    group: str
    seed: int
    rounds: int
    history: pd.DataFrame
    setting: str = ""  # the tuning candidate the run trained with (Arm.setting)
    diverged: bool = False  # a tuning candidate that diverged (its history is empty: it loses the tuning)
    _logged: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def logged(self, source: str) -> Logged:
        """logged(history, source), read once: an evaluation reads each column for several metrics, on the
        whole table and on every seed alone."""
        if source not in self._logged:
            self._logged[source] = logged(self.history, source)
        return self._logged[source]


def logged(history: pd.DataFrame, source: str) -> Logged:
    """(rounds, values) of a history's column, the rows where both are logged, in round order; None when the
    history has no such column."""
    if source not in history:
        return None
    data = history[["round", source]].dropna().sort_values("round")
    return data["round"].to_numpy(), data[source].to_numpy(dtype=float)


def measure(metric: Metric, series: Logged, rounds: int) -> float:
    """The metric on one run's logged(history, metric.source); rounds-to-target is inf when the target is not
    reached (NaN = not logged)."""
    if series is None or not len(series[0]):
        return math.nan
    logged_rounds, values = series
    if metric.kind == "rounds":
        hit = values >= metric.target if metric.mode == "max" else values <= metric.target
        hit &= logged_rounds >= 1  # round 0 is the initial model
        return float(logged_rounds[hit.argmax()] - metric.offset) if hit.any() else math.inf
    if metric.kind == "at":
        at = rounds if metric.at is None else metric.at
        upto = values[logged_rounds <= at]
        value = upto[-1] if len(upto) else math.nan
    elif metric.kind == "per_round":  # a cumulative counter (wall_time, floats_up) divided by the rounds run
        value = values[-1] / logged_rounds[-1]
    elif metric.kind == "mean_last":  # the `last` logged rounds up to round `at` (the end when None)
        upto = values if metric.at is None else values[logged_rounds <= metric.at]
        value = upto[-metric.last :].mean() if len(upto) else math.nan
    elif metric.kind == "min":
        value = values.min()
    elif metric.kind == "max":
        value = values.max()
    else:
        raise ValueError(f"unknown metric kind {metric.kind!r}")
    return float(value) * metric.scale


def parse_paper(value: str) -> float:
    """A published cell as a number: inf for not reached ('100+', '>100', '-'), NaN for no number."""
    text = str(value).strip().rstrip("%")
    if text in NOT_REACHED or text.startswith(">") or text.endswith("+"):
        return math.inf
    try:
        return float(text)
    except ValueError:
        return math.nan


def paper_budget(value: str) -> float:
    """The round budget a published 'not reached' cell states ('100+', '>100' -> 100); NaN when it states none."""
    digits = "".join(ch for ch in str(value).split("(")[0] if ch.isdigit() or ch == ".")
    return float(digits) if digits and math.isinf(parse_paper(str(value).split(" (")[0])) else math.nan


def format_rounds(mean: float, std: float, reached: int, n: int, budget: int) -> str:
    """'34 ± 2.1', '>R' when no seed reached the target, '>R (2/3)' when only some did."""
    if reached == 0:
        return f">{budget}"
    if reached < n:
        return f">{budget} ({reached}/{n})"
    return format_value(mean, std, rounds=True)


def after_text(row) -> str:
    """A rounds-to-target's final and worst value after the target round, over the seeds that reached it:
    'final 0.84 ± 0.01, worst 0.79' ('' for other metrics or when no seed reached the target)."""
    if not row.rounds_metric or not isinstance(row.finals, list):
        return ""
    finals, worst = np.asarray(row.finals, dtype=float), np.asarray(row.worst, dtype=float)
    finals, worst = finals[np.isfinite(finals)], worst[np.isfinite(worst)]
    if not len(finals):
        return ""
    std = finals.std(ddof=1) if len(finals) > 1 else math.nan
    return f"final {format_value(float(finals.mean()), std)}, worst {(worst.min() if row.higher else worst.max()):.4g}"


def format_value(mean: float, std: float, rounds: bool = False) -> str:
    if math.isnan(mean):
        return "n/a"
    body = f"{mean:.1f}" if rounds else f"{mean:.4g}"
    if not math.isnan(std) and std > 0:
        body += f" ± {std:.2g}"
    return body


def speedup(reference: float, value: float, budget: float) -> tuple[float, str]:
    """reference / value and its text; a reference that never reached the target gives a lower bound."""
    if math.isnan(reference) or math.isnan(value) or math.isinf(value) or value <= 0:
        return math.nan, ""
    if math.isinf(reference):
        return (budget / value, f">{budget / value:.2f}×") if math.isfinite(budget) else (math.nan, "")
    return reference / value, f"{reference / value:.2f}×"


# A run collapses when, having reached a rounds-to-target's target, it ends far from it: an accuracy (mode max)
# more than COLLAPSE_POINTS below the target, an error or loss (mode min) more than COLLAPSE_FACTOR times above it.
# Its rounds-to-target still counts (the paper's metric is the first round), but the comparison flags it, the
# tuning's stability guard rejects the candidate, and the claims say so.
COLLAPSE_POINTS = 0.10
COLLAPSE_FACTOR = 10.0
COLLAPSE_RULE = (f"a run collapses when, after reaching the target, it ends more than {COLLAPSE_POINTS * 100:g} accuracy "
                 f"points below it (an error or loss: more than {COLLAPSE_FACTOR:g}x above it); one that falls that far at "
                 "some round after the target and recovers is listed too, as a transient collapse with its round and value")


def from_round_1(series: Logged) -> tuple[np.ndarray, np.ndarray]:
    """The logged (rounds, values) after the initial model (round 0)."""
    logged_rounds, values = series
    trained = logged_rounds >= 1
    return logged_rounds[trained], values[trained]


def after_target(metric: Metric, series: Logged) -> tuple[float, float, bool]:
    """A rounds-to-target run's final value, its worst value from the target round on, and whether it collapsed
    (COLLAPSE_RULE), on logged(history, metric.source); NaN, NaN, False when the target was not reached."""
    if series is None:
        return math.nan, math.nan, False
    _, values = from_round_1(series)
    hit = values >= metric.target if metric.mode == "max" else values <= metric.target
    if not hit.any():
        return math.nan, math.nan, False
    after = values[hit.argmax():]
    final = float(after[-1])
    if metric.mode == "max":
        return final, float(np.nanmin(after)), bool(not final >= metric.target - COLLAPSE_POINTS)
    return final, float(np.nanmax(after)), bool(not final <= metric.target * COLLAPSE_FACTOR)


def transient_collapse(metric: Metric, series: Logged) -> tuple[int, float] | None:
    """The first round after the target round at which a run that ends above the collapse threshold was beyond it
    (COLLAPSE_RULE: a transient collapse), with its value, on logged(history, metric.source); None when it never
    was, or did not reach the target, or ends beyond it (a collapse, after_target)."""
    if series is None:
        return None
    rounds, values = from_round_1(series)
    hit = values >= metric.target if metric.mode == "max" else values <= metric.target
    if not hit.any():
        return None
    after, after_rounds = values[hit.argmax():], rounds[hit.argmax():]
    low = (after < metric.target - COLLAPSE_POINTS) if metric.mode == "max" else (after > metric.target * COLLAPSE_FACTOR)
    low |= np.isnan(after)
    if not low.any() or low[-1]:
        return None
    first = int(low.argmax())
    return int(after_rounds[first]), float(after[first])


def curve(series: Logged) -> np.ndarray:
    """[rounds, 2]: the (round, value) pairs of logged(history, source) from round 1 on (a claim about every round
    reads them)."""
    if series is None:
        return np.empty((0, 2))
    return np.stack([part.astype(float) for part in from_round_1(series)], axis=1)


def aggregate(rep: Reproduction, runs: list[RunResult], extra: tuple[Metric, ...] = ()) -> pd.DataFrame:
    """One row per (arm, metric), the entry's metrics and `extra`: mean and std over seeds of the measured values;
    a rounds-to-target also has each seed's final and worst value after the target round, and its collapses."""
    rows = []
    keys = list(dict.fromkeys((r.method, r.group, r.setting) for r in runs))
    for method, group, setting in keys:
        arm_runs = [r for r in runs if (r.method, r.group, r.setting) == (method, group, setting)]
        budget = max(r.rounds for r in arm_runs)
        for metric in (m for m in (*rep.metrics, *extra) if m.applies(group)):
            columns = [r.logged(metric.source) for r in arm_runs]
            values = np.array([measure(metric, column, r.rounds) for column, r in zip(columns, arm_runs)], dtype=float)
            finite = values[np.isfinite(values)]
            reached = len(finite)
            mean = finite.mean() if reached else (math.inf if np.isinf(values).any() else math.nan)
            if metric.is_rounds and reached < len(values):
                mean = math.inf
            std = finite.std(ddof=1) if reached > 1 else math.nan
            after = [after_target(metric, column) if metric.is_rounds else (math.nan, math.nan, False) for column in columns]
            rows.append(dict(method=method, group=group, setting=setting, metric=metric.name, mean=mean, std=std,
                             reached=reached, n=len(values), budget=budget - metric.offset,
                             diverged=sum(r.diverged for r in arm_runs),
                             rounds_metric=metric.is_rounds, higher=metric.mode == "max", values=values.tolist(),
                             seed_ids=[r.seed for r in arm_runs], finals=[a[0] for a in after], worst=[a[1] for a in after],
                             collapsed=[r.seed for r, a in zip(arm_runs, after) if a[2]],
                             transient=[(r.seed, *dip) for r, column in zip(arm_runs, columns)
                                        if metric.is_rounds and (dip := transient_collapse(metric, column)) is not None],
                             series=[curve(column) for column in columns]))
    return pd.DataFrame(rows)


def collapse_text(row) -> str:
    """'seed 2; seed 1 transient: 0 at round 15, recovered': the seeds that collapsed (COLLAPSE_RULE), then those
    that collapsed after the target round and recovered, each with its round and value."""
    ended = [f"seed {s}" for s in row.collapsed] if isinstance(row.collapsed, list) else []
    dips = getattr(row, "transient", None)
    dips = [f"seed {s} transient: {v:.4g} at round {r}, recovered" for s, r, v in dips] if isinstance(dips, list) else []
    return "; ".join(ended + dips)


def comparison(rep: Reproduction, measured: pd.DataFrame, paper_groups: dict[str, str] | None = None) -> pd.DataFrame:
    """Paper and measured side by side, with the speed-up over the paper's reference method. A measured
    group that stands for a paper column (`paper_groups`, a scaled-down setting) shows that column's cell,
    named: '3 (FMNIST (1000) IID)'."""
    paper = rep.paper_numbers()
    paper = paper.assign(paper_value=paper["value"].map(parse_paper)).rename(columns={"value": "paper"})
    paper_groups = paper_groups or {}
    measured = measured.assign(paper_group=[paper_groups.get(g, g) for g in measured["group"]])
    table = measured.merge(paper.rename(columns={"group": "paper_group"}), on=["method", "paper_group", "metric"], how="left")
    table["paper"] = table["paper"].fillna("")
    derived = rep.derived_cells()
    table["paper"] = [f"{p} (derived, not printed)" if p and (m, g, k) in derived else p
                      for p, m, g, k in zip(table["paper"], table["method"], table["paper_group"], table["metric"])]
    stands_for = (table["paper"] != "") & (table["paper_group"] != table["group"])
    table.loc[stands_for, "paper"] = table["paper"][stands_for] + " (" + table["paper_group"][stands_for] + ")"
    table = table.drop(columns="paper_group")
    table["paper_value"] = table["paper_value"].astype(float)
    table["measured"] = [
        format_rounds(r.mean, r.std, r.reached, r.n, r.budget) if r.rounds_metric else format_value(r.mean, r.std)
        for r in table.itertuples()
    ]
    table["seeds"] = ["; ".join(f"{s}: {show(v)}" for s, v in zip(r.seed_ids, r.values)) if isinstance(r.seed_ids, list) else ""
                      for r in table.itertuples()]
    table["after_target"] = [after_text(r) for r in table.itertuples()]
    table["collapse"] = [collapse_text(r) for r in table.itertuples()]
    lookup = {(r.method, r.group, r.metric): r for r in table.itertuples()}
    paper_speed, speed, speed_value = [], [], []
    for r in table.itertuples():
        ref_name = rep.reference_for(r.method)
        ref = lookup.get((ref_name, r.group, r.metric)) if ref_name else None
        if not r.rounds_metric or ref is None:
            paper_speed.append(""), speed.append(""), speed_value.append(math.nan)
            continue
        paper_speed.append(speedup(ref.paper_value, r.paper_value, paper_budget(ref.paper))[1] if r.paper else "")
        value, text = speedup(ref.mean, r.mean, ref.budget)  # an unreached reference counts as its own budget
        speed.append(text), speed_value.append(value)
    table["paper_speedup"], table["speedup"], table["speedup_value"] = paper_speed, speed, speed_value
    return table


# ------------------------------------------------------------------------------------------ equal tuning
# Each tuned method runs every candidate of its grid (Scale.tune); per method and group the winner is chosen
# by the rule of fedbench.tracking.best (the one `fedbench report --best-by` applies), and the comparison and
# the claims use the winners.
def tie_break() -> Metric:
    from fedbench.tracking.best import TIE_BREAK_LAST

    return Metric(f"last{TIE_BREAK_LAST}_acc", "mean_last", last=TIE_BREAK_LAST, scale=100)


def primary(rep: Reproduction, scale: Scale, group: str) -> tuple[str, bool]:
    """The metric that picks a group's winners, and whether higher is better: the entry's rounds-to-target
    that applies to the group, else the scale's `tune.by` (first when `tune.by_first`)."""
    rounds = [m.name for m in rep.metrics if m.is_rounds and m.applies(group)]
    if rounds and not (scale.tune is not None and scale.tune.by_first):
        return rounds[0], False
    if scale.tune is None or scale.tune.by is None:
        raise ValueError(f"{rep.name}: no rounds-to-target for {group!r} and no tune.by to choose the winners")
    return scale.tune.by, not scale.tune.lower


def tuning_table(rep: Reproduction, scale: Scale, measured: pd.DataFrame) -> pd.DataFrame:
    """One row per tuned arm (method, group, candidate): its primary metric (as measured and as a number),
    the tie-break, and `chosen` for each method and group's winner."""
    from fedbench.tracking.best import pick_best

    cols = ["method", "group", "setting", "by", "value", "shown", "tie_break", "chosen"]
    tuned = measured[measured["setting"] != ""] if "setting" in measured else measured.iloc[0:0]
    if tuned.empty:
        return pd.DataFrame(columns=cols)
    tie = tie_break().name
    rows, order = [], {}
    for (method, group, setting), cell in tuned.groupby(["method", "group", "setting"], sort=False):
        name, higher = primary(rep, scale, group)
        order[group] = higher
        row = cell[cell["metric"] == name]
        guard = cell[cell["metric"] == guard_metric(rep, group, name)]
        last = cell[cell["metric"] == tie]["mean"]
        value = float(row["mean"].iloc[0]) if not row.empty else math.nan
        shown = candidate_text(row.iloc[0]) if not row.empty else "n/a"
        collapsed = list(guard["collapsed"].iloc[0]) if not guard.empty and isinstance(guard["collapsed"].iloc[0], list) else []
        if collapsed:
            shown += " collapsed (" + ", ".join(f"seed {s}" for s in collapsed) + ")"
        dips = list(row["transient"].iloc[0]) if not row.empty and isinstance(row["transient"].iloc[0], list) else []
        if dips:  # shown; the guard looks at the end of a run only
            shown += " transient collapse (" + ", ".join(f"seed {s} round {r}: {v:.4g}" for s, r, v in dips) + ")"
        rows.append(dict(method=method, group=group, setting=setting, by=name, value=value, shown=shown,
                         tie_break=float(last.iloc[0]) if not last.empty else math.nan, stable=float(not collapsed)))
    table = pd.DataFrame(rows)
    # the stability guard: a candidate with a collapsed seed ranks below every stable one, for every method alike
    chosen = pd.concat([pick_best(table[table["group"] == g], ["method"], [("stable", True), ("value", higher),
                                                                            ("tie_break", True)])
                        for g, higher in order.items()])
    picked = set(zip(chosen["method"], chosen["group"], chosen["setting"]))
    table["chosen"] = [k in picked for k in zip(table["method"], table["group"], table["setting"])]
    return table[cols]


def guard_metric(rep: Reproduction, group: str, primary_name: str) -> str:
    """The metric whose collapses the stability guard reads: the primary metric when it is a rounds-to-target, else
    the group's first rounds-to-target (when `tune.by` ranks by an error), else the primary metric."""
    if any(m.name == primary_name and m.is_rounds for m in rep.metrics):
        return primary_name
    return next((m.name for m in rep.metrics if m.is_rounds and m.applies(group)), primary_name)


def candidate_text(row) -> str:
    """A candidate's primary metric as the grid shows it: '>30' when not reached, 'diverged (1/2)' when seeds diverged."""
    if row["diverged"]:
        return "diverged" if row["diverged"] == row["n"] else f"diverged ({int(row['diverged'])}/{int(row['n'])})"
    if row["rounds_metric"]:
        return format_rounds(row["mean"], row["std"], int(row["reached"]), int(row["n"]), int(row["budget"]))
    return format_value(row["mean"], row["std"])


def winners(measured: pd.DataFrame, tuning: pd.DataFrame) -> pd.DataFrame:
    """The rows of the untuned arms and of each tuned method's chosen candidate."""
    if tuning.empty:
        return measured
    chosen = set(zip(*(tuning.loc[tuning["chosen"], k] for k in ("method", "group", "setting"))))
    keep = [s == "" or k in chosen for s, k in zip(measured["setting"], zip(measured["method"], measured["group"], measured["setting"]))]
    return measured[keep].reset_index(drop=True)


def tuning_markdown(rep: Reproduction, scale: Scale, tuning: pd.DataFrame) -> str:
    """The grid and the winner per method: every candidate with its primary metric and tie-break, the rule once."""
    from fedbench.tracking.best import rule

    if tuning.empty:
        return ""
    sizes = tuning.groupby(["method", "group"], sort=False).size()
    rules = dict.fromkeys(rule(r.by, primary(rep, scale, r.group)[1]) for r in tuning.itertuples())
    guard = (f" Stability guard, the same for every method: a candidate with a collapsed seed ({COLLAPSE_RULE}) "
             "loses to every candidate without one; a transient collapse is shown, not ranked."
             if any(m.is_rounds for m in rep.metrics) else "")
    lines = [f"Equal tuning: every method runs {int(sizes.iloc[0])} candidates per group; the winner per method and group "
             f"has the {'; '.join(rules)}.{guard} The comparison and the claims use the winners."
             + (f" Not tuned: {', '.join(scale.tune.fixed)} (the setting in the note)." if scale.tune.fixed else ""), "",
             f"| method | group | candidate | {' / '.join(dict.fromkeys(tuning['by']))} | {tie_break().name} | chosen |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.method} | {r.group} | {r.setting} | {r.shown} | {format_value(r.tie_break, math.nan)} | "
              f"{'**winner**' if r.chosen else ''} |" for r in tuning.itertuples()]
    return "\n".join(lines)


DISPLAY = ["method", "group", "setting", "metric", "paper", "measured", "after_target", "collapse", "paper_speedup", "speedup", "n"]


def display_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The columns of the comparison a reader compares (DISPLAY), as text; empty ones left out."""
    cols = [c for c in DISPLAY if c in table and (c not in ("setting", "after_target", "collapse") or (table[c] != "").any())]
    show = table[cols].astype(str)
    if "paper_speedup" in show and not (show["paper_speedup"] != "").any() and not (show["speedup"] != "").any():
        show = show.drop(columns=["paper_speedup", "speedup"])
    return show


def to_markdown(table: pd.DataFrame, title: str = "") -> str:
    from fedbench.tracking.report import markdown_cell

    show = display_frame(table)
    header = "| " + " | ".join(map(markdown_cell, show.columns)) + " |"
    rule = "|" + "|".join("---" for _ in show.columns) + "|"
    lines = [f"### {title}", ""] if title else []
    lines += [header, rule] + ["| " + " | ".join(map(markdown_cell, row)) + " |" for row in show.itertuples(index=False)]
    return "\n".join(lines)


def to_csv_frame(table: pd.DataFrame, tuning: pd.DataFrame | None = None) -> pd.DataFrame:
    """The comparison's rows; with a tuning grid also one row per candidate that was not chosen (its primary
    metric), and `chosen` says which rows are winners."""
    cols = ["method", "group", "setting", "metric", "paper", "paper_value", "measured", "mean", "std", "reached", "n",
            "budget", "after_target", "collapse", "seeds", "paper_speedup", "speedup", "speedup_value", "chosen"]
    if tuning is not None and not tuning.empty:
        others = tuning[~tuning["chosen"]].rename(columns={"by": "metric", "shown": "measured", "value": "mean"})
        table = pd.concat([table.assign(chosen=table["setting"] != ""), others], ignore_index=True)
    return table[[c for c in cols if c in table]]


def cell(table: pd.DataFrame, method: str, group: str, metric: str, column: str):
    """One cell of the comparison table, of its first row for (method, group, metric); KeyError if absent (a
    claim check reads hundreds: compared as arrays, not as pandas masks)."""
    found = np.flatnonzero((table["method"].to_numpy() == method) & (table["group"].to_numpy() == group)
                           & (table["metric"].to_numpy() == metric))
    if not len(found):
        raise KeyError(f"no measured {metric} for {method} [{group}]")
    return table[column].to_numpy()[found[0]]


def value(table: pd.DataFrame, method: str, group: str, metric: str, column: str = "mean") -> float:
    """A measured number of the comparison table (inf = target not reached); KeyError if absent."""
    return float(cell(table, method, group, metric, column))


def seeds(table: pd.DataFrame, method: str, group: str, metric: str) -> np.ndarray:
    """The per-seed values of one cell (inf = not reached)."""
    return np.asarray(cell(table, method, group, metric, "values"), dtype=float)


# ------------------------------------------------------------------------------------- claims that can fail
# Every check_* compares measured numbers through these helpers, never with a raw `<`/`<=`/`==`, so that a
# claim cannot hold by default: a target nobody reached (inf) never wins and never ties, a comparison whose
# quantities are all unreached or unmeasured (NaN) is "not shown" (it does not hold), and a ratio with a zero
# or non-finite denominator is undefined (not shown) instead of a ZeroDivisionError or an inf that passes.
NOT_SHOWN = "not shown: no method reached the target"


def show(x: float) -> str:
    """A measured number for a claim's detail: 'not reached' for inf, 'not measured' for NaN."""
    x = float(x)
    return "not measured" if math.isnan(x) else "not reached" if math.isinf(x) else f"{x:g}"


def numbers(named: dict[str, float]) -> str:
    return ", ".join(f"{name} {show(v)}" for name, v in named.items())


def first_to_target(text: str, ours: tuple[str, float], others: dict[str, float], strict: bool = False) -> Claim:
    """Rounds-to-target: `ours` reaches the target no later than (strict: before) every one of `others`.

    A finite count beats an unreached one (inf); an unreached `ours` never wins nor ties; when nothing was
    reached (or measured) the claim is not shown."""
    name, mine = ours
    named = {name: mine, **others}
    detail = numbers(named)
    if not any(math.isfinite(v) for v in named.values()):
        return Claim(text, False, f"{NOT_SHOWN} ({detail})")
    missing_ = [n for n, v in named.items() if math.isnan(v)]
    if missing_:
        return Claim(text, False, f"not shown: {', '.join(missing_)} not measured ({detail})")
    if math.isinf(mine):
        return Claim(text, False, detail)
    holds = all(math.isinf(v) or (mine < v if strict else mine <= v) for v in others.values())
    return Claim(text, holds, detail)


def unshown(text: str, values, detail: str) -> Claim | None:
    """The failed claim of rounds-to-target comparisons with nothing to show: no value reached the target, or one
    was not measured; None when the values can be compared."""
    if not any(math.isfinite(v) for v in values):
        return Claim(text, False, f"{NOT_SHOWN} ({detail})")
    if any(math.isnan(v) for v in values):
        return Claim(text, False, f"not shown: not measured ({detail})")
    return None


def rounds_decrease(text: str, chain: list[tuple[str, float]]) -> Claim:
    """Rounds-to-target that do not increase along `chain` (e.g. E = 1, 5, 10): every later entry is reached,
    no later than the one before it (or the one before it never reached the target)."""
    named = dict(chain)
    detail = numbers(named)
    values = [v for _, v in chain]
    if (claim := unshown(text, values, detail)) is not None:
        return claim
    holds = all(math.isfinite(b) and (math.isinf(a) or b <= a) for a, b in zip(values, values[1:]))
    return Claim(text, holds, detail)


def speedup_at_least(text: str, ours: tuple[str, float], reference: tuple[str, float], budget: float,
                     minimum: float) -> Claim:
    """Rounds-to-target: reference / ours >= minimum, where an unreached reference counts as its round budget
    (the speed-up is then a lower bound); an unreached `ours` never shows a speed-up."""
    (name, mine), (ref_name, ref) = ours, reference
    detail = numbers({name: mine, ref_name: ref})
    if (claim := unshown(text, (mine, ref), detail)) is not None:
        return claim
    if math.isinf(mine) or mine <= 0:
        return Claim(text, False, detail)
    bound = min(ref, budget)
    return Claim(text, bound / mine >= minimum, f"{detail}: speed-up {'>=' if math.isinf(ref) else ''}{bound / mine:.3g}")


def reduction_at_least(text: str, ours: tuple[str, float], others: dict[str, float], budget: float,
                       minimum: float) -> Claim:
    """Rounds-to-target: 1 - ours / (the best of `others`) >= minimum (Table III's "Reduction"), where an
    unreached other counts as its round budget (the reduction is then a lower bound)."""
    name, mine = ours
    detail = numbers({name: mine, **others})
    if (claim := unshown(text, (mine, *others.values()), detail)) is not None:
        return claim
    if math.isinf(mine):
        return Claim(text, False, detail)
    best = min(min(v, budget) for v in others.values())
    reduction = 1 - mine / best
    bound = ">=" if all(math.isinf(v) for v in others.values()) else ""
    return Claim(text, reduction >= minimum, f"{detail}: reduction {bound}{reduction:.1%}")


def narrowed(claim: Claim, how: str) -> Claim:
    """The claim with the way its check is narrower than the paper's sentence, printed in its line."""
    from dataclasses import replace

    return replace(claim, narrower=how)


def ratio(num: float, den: float) -> float:
    """num / den, NaN when either is not a finite number or den is 0 (0/0, x/0, inf/inf are undefined)."""
    num, den = float(num), float(den)
    if not (math.isfinite(num) and math.isfinite(den)) or den == 0:
        return math.nan
    return num / den


def ratio_claim(text: str, num: float, den: float, ok, what: str = "ratio") -> Claim:
    """A claim on num / den; `ok(r)` decides it. An undefined ratio is not shown (does not hold)."""
    r = ratio(num, den)
    if math.isnan(r):
        return Claim(text, False, f"not shown: {what} undefined ({show(num)} / {show(den)})")
    return Claim(text, bool(ok(r)), f"{what} {r:.3g} ({show(num)} / {show(den)})")


def best(text: str, ours: tuple[str, float], others: dict[str, float], higher: bool = True, margin: float = 0.0,
         strict: bool = False) -> Claim:
    """A measured value (accuracy, loss, error) that is the best: `ours` >= every other + margin (<= - margin
    when lower is better; strict: > / <). NaN anywhere is not shown; so is a comparison in which every
    method measured exactly the same (nothing separates them, e.g. every run stuck at its initial value)."""
    name, mine = ours
    named = {name: mine, **others}
    detail = numbers(named)
    missing_ = [n for n, v in named.items() if math.isnan(v)]
    if missing_:
        return Claim(text, False, f"not shown: {', '.join(missing_)} not measured ({detail})")
    if len(set(named.values())) == 1 and others:
        return Claim(text, False, f"not shown: every method measured {show(mine)} ({detail})")
    sign = 1 if higher else -1
    holds = all(sign * (mine - v) > margin if strict else sign * (mine - v) >= margin for v in others.values())
    return Claim(text, holds, detail)


# ------------------------------------------------------------------------------------------- over seeds
# A claim says what it is about, and its seeds judge it by that: a claim about a mean (the default) holds on the
# seeds' mean and on 2/3 of the seeds; one that says "every seed" holds only on every seed; one that says
# "median" is computed by its check from the per-seed values (compare.seeds) and stands as computed, each seed's
# own verdict shown beside it. A verdict within one seed of flipping is judged again on MIN_SEEDS seeds (run.reproduce).
MIN_SEEDS = 5


def seeds_needed(n: int) -> int:
    """A claim about a mean, judged on n seeds, holds on the mean and on at least 2/3 of them (rounded up): 2 of 3, 4 of 5."""
    return math.ceil(2 * n / 3)


def seed_rule(claim: Claim, k: int, n: int) -> tuple[bool, str, bool]:
    """The verdict of `claim` (judged on the whole table) when k of n seeds hold on their own, the rule in words, and
    whether the verdict is within one seed of flipping: one seed's verdict reversed would reverse it."""
    over = claim.judged_on
    if over == "every seed":
        holds = claim.holds and k == n
        return holds, "on every seed", (holds or k == n - 1)
    if over == "median":
        half = n // 2 + 1  # the median seed holds when this many do (a threshold on one quantity)
        return claim.holds, "on the median of the seeds", k in (half, half - 1)
    need = seeds_needed(n)
    holds = claim.holds and k >= need
    return holds, f"on the mean and on at least {need} of the {n} seeds", (k == need if holds else k >= need - 1)


def per_seed_verdicts(claim: Claim, per_seed: dict[int, list[Claim]]) -> dict[int, Claim | None]:
    return {s: next((c for c in claims if c.text == claim.text), None) for s, claims in per_seed.items()}


def over_seeds(on_mean: list[Claim], per_seed: dict[int, list[Claim]]) -> list[Claim]:
    """Each claim of the whole table judged again on every seed alone (a claim matched by its text; one a seed's
    check did not make counts as not holding there) and decided by its own quantifier (seed_rule): a claim about a
    mean holds when it holds on the mean and on seeds_needed(n) of the n seeds, an "every seed" claim when it holds
    on all n, a "median" claim as its check computed it. The detail gives each seed's verdict and numbers and names
    those that disagree with the verdict on the whole table."""
    n, out = len(per_seed), []
    for claim in on_mean:
        verdicts = per_seed_verdicts(claim, per_seed)
        held = [s for s, c in verdicts.items() if c is not None and c.holds]
        disagree = [s for s, c in verdicts.items() if (c is not None and c.holds) != claim.holds]
        holds, rule, _ = seed_rule(claim, len(held), n)
        each = "; ".join(f"seed {s} {'holds' if c is not None and c.holds else 'does not'}"
                         + (f" ({c.detail})" if c is not None and c.detail else "" if c is not None else " (not judged)")
                         for s, c in verdicts.items())
        what = "mean over seeds" if claim.judged_on == "mean" else f"judged {rule}"
        agree = (f"seed{'s' if len(disagree) > 1 else ''} {', '.join(map(str, disagree))} disagree{'s' if len(disagree) == 1 else ''}"
                 f" with the {'mean' if claim.judged_on == 'mean' else 'whole table'}" if disagree else
                 f"every seed agrees with the {'mean' if claim.judged_on == 'mean' else 'whole table'}")
        detail = (f"{what}: {claim.detail or ('holds' if claim.holds else 'does not hold')}; {len(held)}/{n} seeds hold "
                  f"(judged {rule}), {agree}; per seed: {each}")
        out.append(Claim(claim.text, holds, detail, claim.narrower, claim.over))
    return out


def within_one_seed(on_mean: list[Claim], per_seed: dict[int, list[Claim]]) -> list[str]:
    """The claims whose verdict one seed's verdict reversed would reverse (seed_rule), by text."""
    n, out = len(per_seed), []
    for claim in on_mean:
        k = sum(1 for c in per_seed_verdicts(claim, per_seed).values() if c is not None and c.holds)
        if seed_rule(claim, k, n)[2]:
            out.append(claim.text)
    return out
