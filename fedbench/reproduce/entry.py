"""A reproduction entry: one table or figure of a paper, and the registry the paper modules fill.

An entry names its Hydra preset (fedbench/config/conf/experiment/<paper>/<table>.yaml), the paper's published numbers
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

    @property
    def slug(self) -> str:
        text = f"{self.method}__{self.group}" if self.group else self.method
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


@dataclass(frozen=True)
class Claim:
    text: str
    holds: bool
    detail: str = ""


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
    preset: str | None = None  # fedbench/config/conf/experiment/<preset>.yaml; defaults to `name`
    plot: tuple[str, ...] = ("test_accuracy",)  # figure rows; panels = groups
    plot_log: tuple[str, ...] = ()  # rows drawn on a log scale
    notes: str = ""  # deviations from the paper's protocol
    blocked: str = ""  # why it cannot run in fedbench at all (a missing feature), shown by `list`
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


REPRODUCTIONS: dict[str, Reproduction] = {}


def register(rep: Reproduction) -> Reproduction:
    if rep.name in REPRODUCTIONS:
        raise ValueError(f"reproduction {rep.name!r} registered twice")
    REPRODUCTIONS[rep.name] = rep
    return rep


def grid(methods: dict[str, tuple[str, ...]], groups: dict[str, tuple[str, ...]]) -> tuple[Arm, ...]:
    """Every method in every group, group-major (the order of the paper's columns/panels)."""
    return tuple(Arm(m, g, (*go, *mo)) for g, go in groups.items() for m, mo in methods.items())
