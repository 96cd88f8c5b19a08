"""A reproduction's figure: metric-named axes, the paper's target lines, schedule switches and an x range
that a long reference run does not squeeze."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedbench.reproduce.catalog import get
from fedbench.reproduce.compare import RunResult
from fedbench.reproduce.plots import Marks, draw_figure, shown_rounds
from fedbench.reproduce.run import figure_marks, plan


def curve(method: str, group: str, rounds: int, rate: float) -> RunResult:
    r = np.arange(rounds + 1)
    return RunResult(method, group, 0, rounds, pd.DataFrame({"round": r, "test_accuracy": 1 - np.exp(-rate * r)}))


def test_a_long_reference_run_is_cut_at_the_budget_the_others_share():
    assert shown_rounds([30, 30, 30, 30, 300]) == 30
    assert shown_rounds([100, 100, 150]) == 150  # a modestly longer arm is shown whole
    assert shown_rounds([20]) == 20


def test_figure_draws_targets_switches_and_metric_names():
    runs = [curve("FedSGD", "A", 300, 0.01), curve("FedADMM", "A", 30, 0.3), curve("FedAvg", "A", 30, 0.2),
            curve("FedADMM", "B", 30, 0.3)]
    marks = Marks("round", (("test_accuracy", 0.8, ("A",)),), {("FedADMM", "A"): ((20, "eta 0.5"),)})
    fig = draw_figure(runs, ("test_accuracy",), marks=marks)
    (ax_a, ax_b) = fig.axes[:2]
    assert ax_a.get_xlim() == (0, 30) and ax_a.get_xlabel() == "round" and ax_a.get_ylabel() == "test accuracy"
    dashed = [line.get_ydata()[0] for line in ax_a.lines if line.get_linestyle() == "--"]
    assert dashed == [0.8]
    assert not [line for line in ax_b.lines if line.get_linestyle() == "--"]  # the target is panel A's only
    dotted = [line.get_xdata()[0] for line in ax_a.lines if line.get_linestyle() == ":"]
    assert dotted == [20]
    # the FedSGD curve stops at the panel's range and the legend says it was cut
    sgd = next(line for line in ax_a.lines if line.get_label() == "FedSGD")
    assert sgd.get_xdata().max() == 30
    assert "FedSGD (runs to round 300, cut)" in [t.get_text() for t in fig.legends[0].get_texts()]


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_marks_come_from_the_entry_and_each_arms_config():
    rep = get("fedadmm/fig6")
    marks = figure_marks(rep, plan(rep, rep.scales["ci"], "t"))
    assert marks.x_label == "round" and ("test_accuracy", 0.8, ()) not in marks.targets
    for (method, group), switches in marks.switches.items():  # the control arms hold eta constant
        assert switches == (() if method.endswith("constant") else ((60, "eta 0.5"),)), method
    table3 = get("fedadmm/table3")
    assert ("test_accuracy", 0.8, ("FMNIST",)) in figure_marks(table3, []).targets
    assert figure_marks(get("losac/fig6"), []).x_label == "attack iteration"
