"""A reproduction entry: one table or figure of a paper, and the registry the paper modules fill.

An entry names its Hydra preset (conf/experiment/<paper>/<table>.yaml), the paper's published numbers
(papers/<paper>/<table>.csv, long format: method, group, metric, value), and per scale the arms of its
grid, the seeds, what it needs and the claim it checks. The entries themselves live in one module per
paper (fedbench/reproduce/<paper>.py) and register here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

PAPERS_DIR = Path(__file__).resolve().parent / "papers"
SCALES = ("ci", "full")


@dataclass(frozen=True)
class Arm:
    """One curve of the paper: a row label (`method`), a column/panel label (`group`) and the overrides
    that turn the preset and the scale's settings into it; it runs once per seed of the scale."""

    method: str
    group: str
    overrides: tuple[str, ...] = ()
    preset: str | None = None  # another preset for this arm (e.g. FedMid's own step sizes)
    setting: str = ""  # the tuning candidate this arm runs ("eta_l=0.1"); "" when the method is not tuned

    @property
    def slug(self) -> str:
        text = "__".join(part for part in (self.method, self.group, self.setting) if part)
        return "".join(c if c.isalnum() or c in "-._" else "_" for c in text).strip("_")


@dataclass(frozen=True)
class Metric:
    """How a paper's number is measured from the per-round history of one run.

    kind: `rounds` = first round whose `source` reaches `target` (>= for mode max, <= for min), minus
    `offset` (FedSSO reports r* - 1); `per_round` = a cumulative counter over the rounds run; `at` = value at round `at` (the last round when None); `mean_last`
    = mean over the last `last` logged rounds (up to round `at` when given); `min`/`max` over rounds. `scale` multiplies measured
    values into the paper's unit (100 for accuracies printed in %).
    """

    name: str
    kind: str
    source: str = "test_accuracy"
    target: float | None = None
    mode: str = "max"
    at: int | None = None
    last: int = 10
    offset: int = 0
    scale: float = 1.0
    only: tuple[str, ...] = ()  # measured only in groups whose name starts with one of these (per-data-set targets)

    def applies(self, group: str) -> bool:
        return not self.only or group.startswith(self.only)

    @property
    def is_rounds(self) -> bool:
        return self.kind == "rounds"


def rounds_to(name_target: float, source: str = "test_accuracy", **kw) -> Metric:
    return Metric(f"rounds_to_{name_target:g}", "rounds", source=source, target=name_target, **kw)


@dataclass(frozen=True)
class Tune:
    """Equal tuning (#18): every method of the scale (of the groups in `only`, when given) runs each of its
    candidates, override lists that set its step size and, where the paper tunes it, its own hyperparameter;
    every method has as many candidates as every other (a grid of unequal size is refused at catalog load).
    Per method and group the winner is chosen by one rule (compare.TUNING_RULE): the entry's primary metric
    (its rounds-to-target that applies to the group, else `by`), ties broken by the mean of the last logged
    test accuracies; the claims are judged on the winners."""

    grid: dict[str, tuple[tuple[str, ...], ...]]  # method -> its candidates
    by: str | None = None  # the primary metric's name where the entry has no rounds-to-target (final_acc, ...)
    lower: bool = False  # `by` is better when lower (a loss)
    only: tuple[str, ...] = ()  # tune only the arms of groups starting with one of these (the paper's "optimal" panels)
    # methods that run at their arm's own setting: a reference the claims do not rank against the tuned
    # methods (a speed-up's denominator), where its tuning does not fit the scale; the output names them
    fixed: tuple[str, ...] = ()
    # `by` picks the winners even in groups with a rounds-to-target, whose collapse rule stays the stability guard
    # (composite: the final error decides, since the first round at 1e-4 cannot tell a stall at 1e-6 from 1e-13)
    by_first: bool = False

    def applies(self, group: str, method: str = "") -> bool:
        return (not self.only or group.startswith(self.only)) and method not in self.fixed

    def problems(self, methods: list[str]) -> list[str]:
        """What is unequal: methods of the arms without a grid, and grid sizes that differ."""
        out = [f"{m} has no candidates" for m in dict.fromkeys(methods) if m not in self.grid and m not in self.fixed]
        sizes = {m: len(c) for m, c in self.grid.items()}
        if len(set(sizes.values())) > 1 or 0 in sizes.values():
            out.append("grids of unequal size: " + ", ".join(f"{m} {n}" for m, n in sizes.items()))
        return out


def candidates(*axes: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Every combination of the axes' overrides, the first axis slowest: candidates(("eta_l=0.1", "eta_l=0.5"),
    ("eta_g=1",)) == (("eta_l=0.1", "eta_g=1"), ("eta_l=0.5", "eta_g=1"))."""
    out: list[tuple[str, ...]] = [()]
    for axis in axes:
        out = [(*c, item) for c in out for item in axis]
    return tuple(out)


def axis(key: str, grid) -> tuple[str, ...]:
    """One axis of a grid: axis("eta_l", (0.01, 0.1)) == ("eta_l=0.01", "eta_l=0.1")."""
    return tuple(f"{key}={v:g}" if isinstance(v, float) else f"{key}={v}" for v in grid)


@dataclass(frozen=True)
class Scale:
    """The grid of one scale: its arms, seeds, what it needs, and the settings all its arms share, in
    the config file conf/scale/<config>.yaml (selected as `scale=<config>`, after the preset), so that
    one arm runs by hand as `fedbench run experiment=<preset> scale=<config> <the arm's overrides>`."""

    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    device: str  # "cpu" or "gpu"
    compute: str  # an estimate, e.g. "3 min on 2 CPU cores"
    data: tuple[str, ...] = ()  # data sets read from disk (synthetic/bundled ones are not listed)
    config: str = ""  # <paper>/<table>/<scale> when the scale has shared settings
    note: str = ""  # how this scale differs from the paper
    # a scaled-down group -> the paper's column/panel it stands for: its published cell is shown beside the
    # measured one ("3 (FMNIST (1000) IID)"), so a ci table is never read without the paper's number
    paper_groups: dict[str, str] = field(default_factory=dict)
    tune: Tune | None = None  # equal tuning of every method's step size (and main hyperparameter)

    @property
    def runs(self) -> tuple[Arm, ...]:
        """The arms that train: each arm of a tuned method once per candidate (its overrides last)."""
        out: list[Arm] = []
        for a in self.arms:
            if self.tune is None or not self.tune.applies(a.group, a.method):
                out.append(a)
            else:
                out += [Arm(a.method, a.group, (*a.overrides, *c), a.preset, " ".join(c)) for c in self.tune.grid[a.method]]
        return tuple(out)


@dataclass(frozen=True)
class Claim:
    """One checked statement: `text` says what is checked; `narrower`, when the check is narrower than the paper's
    sentence (the entry's `quote`), says how, and is printed in the claim's line."""

    text: str
    holds: bool
    detail: str = ""
    narrower: str = ""
    # how several seeds judge it (compare.over_seeds): "mean" (the seeds' mean and 2/3 of the seeds), "every seed"
    # or "median" (the check computes it from the per-seed values, compare.seeds); "" = as the text says
    over: str = ""

    @property
    def judged_on(self) -> str:
        """The claim's own quantifier: "median" or "every seed" when its text says so, else "mean"."""
        if self.over:
            return self.over
        text = self.text.lower()
        return "median" if "median" in text else "every seed" if "every seed" in text or "each seed" in text else "mean"

    @property
    def is_proxy(self) -> bool:
        """A check of the spec's proxy target, not of the paper's sentence: shown, never counted as a held claim
        of the paper."""
        return self.text.startswith(PROXY)


PROXY = "not the paper's claim"  # the first words of a claim that checks the spec's proxy target


def paper_count(claims: list[Claim]) -> str:
    """'3 / 5' of the paper's claims, and the spec's proxies apart: '3 / 5 (+ spec proxies 2 / 2)'."""
    paper = [c for c in claims if not c.is_proxy]
    proxies = [c for c in claims if c.is_proxy]
    text = f"{sum(c.holds for c in paper)} / {len(paper)}"
    return text + (f" (+ spec proxies {sum(c.holds for c in proxies)} / {len(proxies)})" if proxies else "")


Check = Callable[["pd.DataFrame", str], list[Claim]]


@dataclass(frozen=True)
class Reproduction:
    name: str  # <paper>/<table>, also the MLflow experiment and the preset path
    paper: str
    title: str  # "Table 2: rounds to 85% ..."
    claim: str
    metrics: tuple[Metric, ...]
    scales: dict[str, Scale]
    check: Check
    reference: str | dict[str, str] | None = None  # the paper's reference method(s) for speed-ups
    preset: str | None = None  # conf/experiment/<preset>.yaml; defaults to `name`
    plot: tuple[str, ...] = ("test_accuracy",)  # figure rows; panels = groups
    plot_log: tuple[str, ...] = ()  # rows drawn on a log scale
    notes: str = ""  # deviations from the paper's protocol
    blocked: str = ""  # why it cannot run in fedbench at all (a missing feature), shown by `list`
    quote: str = ""  # the paper's sentence(s) the claims check, quoted, with page/table/figure
    runner: str = "train"  # train: `fedbench run` per arm and seed | dlg: the DLG attack on round `rounds` (LoSAC Fig. 6)

    @property
    def preset_path(self) -> str:
        return self.preset or self.name

    def reference_for(self, method: str) -> str | None:
        if isinstance(self.reference, dict):
            return self.reference.get(method)
        return self.reference

    def paper_numbers(self) -> pd.DataFrame:
        path = PAPERS_DIR / f"{self.name}.csv"
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        return frame[["method", "group", "metric", "value"]]

    def derived_cells(self) -> set[tuple[str, str, str]]:
        """(method, group, metric) of the published cells the paper does not print but implies (note 'derived, ...')."""
        frame = pd.read_csv(PAPERS_DIR / f"{self.name}.csv", dtype=str, keep_default_na=False)
        if "note" not in frame:
            return set()
        rows = frame[frame["note"].str.startswith("derived")]
        return set(zip(rows["method"], rows["group"], rows["metric"]))


REPRODUCTIONS: dict[str, Reproduction] = {}


def register(rep: Reproduction) -> Reproduction:
    from dataclasses import replace

    from fedbench.reproduce.quotes import QUOTES

    if rep.name in REPRODUCTIONS:
        raise ValueError(f"reproduction {rep.name!r} registered twice")
    if not rep.quote and rep.name in QUOTES:
        rep = replace(rep, quote=QUOTES[rep.name])
    for name, scale in rep.scales.items():
        if scale.tune is not None:
            tuned = [a for a in scale.arms if scale.tune.applies(a.group, a.method)]
            problems = scale.tune.problems([a.method for a in tuned])
            metrics = {m.name for m in rep.metrics}
            if scale.tune.by is not None and scale.tune.by not in metrics:
                problems.append(f"tune.by {scale.tune.by!r} is not a metric of the entry ({', '.join(sorted(metrics))})")
            if scale.tune.by is None and any(not any(m.is_rounds and m.applies(a.group) for m in rep.metrics) for a in tuned):
                problems.append("a tuned group has no rounds-to-target to choose the winners by: set tune.by")
            refs = {rep.reference} if isinstance(rep.reference, str) else set((rep.reference or {}).values())
            problems += [f"{m} is left untuned but is not the entry's reference" for m in scale.tune.fixed if m not in refs]
            if problems:
                raise ValueError(f"{rep.name} ({name}): equal tuning needs one grid per method, all of the same size; "
                                 + "; ".join(problems))
    REPRODUCTIONS[rep.name] = rep
    return rep


def grid(methods: dict[str, tuple[str, ...]], groups: dict[str, tuple[str, ...]]) -> tuple[Arm, ...]:
    """Every method in every group, group-major (the order of the paper's columns/panels)."""
    return tuple(Arm(m, g, (*go, *mo)) for g, go in groups.items() for m, mo in methods.items())
