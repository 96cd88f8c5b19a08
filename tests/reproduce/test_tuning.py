"""Equal tuning (#18): every method of a tuned scale runs a grid of the same size, the winner per method and
group is chosen by one rule (fedbench.tracking.best, shared with `fedbench report --best-by`), the claims are
judged on the winners and the output names every candidate and the winner."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import fedbench.reproduce.entry as entry_module
from fedbench.reproduce.catalog import load_catalog
from fedbench.reproduce.compare import RunResult, to_csv_frame
from fedbench.reproduce.entry import Arm, Claim, Metric, Reproduction, Scale, Tune, axis, candidates, register, rounds_to
from fedbench.reproduce.run import evaluate, report
from fedbench.tracking.best import pick_best
from fedbench.tracking.report import build_table

CATALOG = load_catalog()
GRID = candidates(axis("eta_l", (0.1, 0.5, 1.0)))
SEEN: dict[str, pd.DataFrame] = {}  # the table the fake entry's check was given


def curve(hit: int | None, last: float, rounds: int = 12) -> pd.DataFrame:
    """Accuracy 0.1 until round `hit` (None: never), where it reaches 0.5, then `last` (below 0.5 when never)."""
    r = np.arange(rounds + 1)
    acc = np.full(len(r), 0.1) if hit is None else np.where(r >= hit, 0.5, 0.1)
    acc = np.where(r > (hit or 1), last, acc)
    return pd.DataFrame({"round": r, "test_accuracy": acc})


def tuned_rep(tmp_path, monkeypatch, check=None, by: Tune | None = None) -> Reproduction:
    monkeypatch.setattr(entry_module, "PAPERS_DIR", tmp_path)
    (tmp_path / "fake").mkdir(parents=True, exist_ok=True)
    (tmp_path / "fake" / "tuned.csv").write_text("method,group,metric,value,note\nA,g,rounds_to_0.5,4,\nB,g,rounds_to_0.5,2,\n")
    arms = (Arm("A", "g", ("algorithm=fedavg",)), Arm("B", "g", ("algorithm=fedprox",)))
    SEEN.clear()

    def keep(table, scale):
        SEEN["table"] = table
        return [Claim("B first", True)]

    rep = Reproduction(name="fake/tuned", paper="fake", title="T", claim="B first",
                       metrics=(rounds_to(0.5), Metric("acc", "at", scale=100)),
                       scales={"ci": Scale(arms, (0, 1), "cpu", "s", tune=by or Tune({"A": GRID, "B": GRID}))},
                       check=check or keep)
    return rep


def runs_of(spec: dict) -> list[RunResult]:
    """{(method, setting): [history per seed] or 'diverged'}"""
    out = []
    for (method, setting), histories in spec.items():
        if histories == "diverged":
            out += [RunResult(method, "g", s, 12, pd.DataFrame({"round": []}), setting, diverged=True) for s in (0, 1)]
        else:
            out += [RunResult(method, "g", s, 12, h, setting) for s, h in enumerate(histories)]
    return out


def test_the_rule_fewest_rounds_then_last_accuracies_then_grid_order(tmp_path, monkeypatch):
    rep = tuned_rep(tmp_path, monkeypatch)
    runs = runs_of({
        # A: eta 0.5 reaches 50% first on one seed only (counts as not reached); eta 1 never, however high it ends
        ("A", "eta_l=0.1"): [curve(4, 0.6), curve(4, 0.6)],
        ("A", "eta_l=0.5"): [curve(1, 0.9), curve(None, 0.4)],
        ("A", "eta_l=1"): [curve(None, 0.45), curve(None, 0.45)],
        # B: eta 0.1 and 0.5 tie at round 2; 0.5 ends higher; eta 1 diverged
        ("B", "eta_l=0.1"): [curve(2, 0.6), curve(2, 0.6)],
        ("B", "eta_l=0.5"): [curve(2, 0.7), curve(2, 0.7)],
        ("B", "eta_l=1"): "diverged",
    })
    table, claims, tuning = evaluate(rep, "ci", runs)
    chosen = tuning[tuning["chosen"]].set_index("method")["setting"].to_dict()
    assert chosen == {"A": "eta_l=0.1", "B": "eta_l=0.5"}
    shown = tuning.set_index(["method", "setting"])["shown"]
    assert shown[("A", "eta_l=0.5")] == ">12 (1/2)" and shown[("A", "eta_l=1")] == ">12" and shown[("B", "eta_l=1")] == "diverged"
    # the comparison and the claims see the winners only, one row per (method, group, metric)
    seen = SEEN["table"].set_index(["method", "metric"])
    assert len(seen) == 4 and seen.loc[("A", "rounds_to_0.5"), "mean"] == 4 and seen.loc[("B", "acc"), "mean"] == pytest.approx(70)
    assert set(seen["setting"]) == {"eta_l=0.1", "eta_l=0.5"} and "last10_acc" not in set(table["metric"])


def test_nothing_reached_the_last_accuracies_decide_and_a_full_tie_keeps_the_grid_order(tmp_path, monkeypatch):
    rep = tuned_rep(tmp_path, monkeypatch)
    runs = runs_of({("A", s): [curve(None, last)] * 2 for s, last in (("eta_l=0.1", 0.3), ("eta_l=0.5", 0.4), ("eta_l=1", 0.2))}
                   | {("B", s): [curve(3, 0.6)] * 2 for s in ("eta_l=0.1", "eta_l=0.5", "eta_l=1")})
    _, _, tuning = evaluate(rep, "ci", runs)
    assert tuning[tuning["chosen"]].set_index("method")["setting"].to_dict() == {"A": "eta_l=0.5", "B": "eta_l=0.1"}


def test_pick_best_ranks_non_finite_last_and_breaks_ties_in_order():
    scores = pd.DataFrame({"k": ["x"] * 4 + ["y"] * 2, "s": ["a", "b", "c", "d", "e", "f"],
                           "rounds": [math.inf, 5, 5, math.nan, math.nan, math.inf], "last": [99, 70, 80, 99, 1, 2]})
    best = pick_best(scores, ["k"], [("rounds", False), ("last", True)])
    assert best["s"].tolist() == ["c", "f"]
    assert pick_best(scores.assign(rounds=5.0, last=1.0), ["k"], [("rounds", False), ("last", True)])["s"].tolist() == ["a", "e"]


def test_grids_of_unequal_size_are_refused_at_catalog_load(tmp_path, monkeypatch):
    monkeypatch.setattr(entry_module, "REPRODUCTIONS", {})
    rep = tuned_rep(tmp_path, monkeypatch, by=Tune({"A": GRID, "B": GRID[:2]}))
    with pytest.raises(ValueError, match=r"fake/tuned \(ci\): equal tuning .* grids of unequal size: A 3, B 2"):
        register(rep)
    rep = tuned_rep(tmp_path, monkeypatch, by=Tune({"A": GRID}))
    with pytest.raises(ValueError, match="B has no candidates"):
        register(rep)
    rep = tuned_rep(tmp_path, monkeypatch, by=Tune({"A": GRID, "B": GRID}, by="final_acc"))
    with pytest.raises(ValueError, match=r"tune.by 'final_acc' is not a metric of the entry \(acc, rounds_to_0.5\)"):
        register(rep)
    register(tuned_rep(tmp_path, monkeypatch))  # equal grids load


def test_every_tuned_catalog_scale_gives_every_method_a_grid_of_one_size():
    tuned = {(n, s): sc for n, rep in CATALOG.items() for s, sc in rep.scales.items() if sc.tune}
    assert {"fedadmm/table3", "losac/table2", "fedsso/fig6", "fedsso/fig7", "fedsso/fig8"} <= {n for n, _ in tuned}
    for (name, scale_name), scale in tuned.items():
        tuned_arms = [a for a in scale.arms if scale.tune.applies(a.group, a.method)]
        sizes = {len(scale.tune.grid[a.method]) for a in tuned_arms}
        assert len(sizes) == 1, (name, scale_name, sizes)
        assert len(scale.runs) == sum(len(scale.tune.grid[a.method]) if a in tuned_arms else 1 for a in scale.arms)
        # a method left untuned is a reference the claims do not rank (a speed-up's denominator), never a competitor
        for a in scale.arms:
            if a.method in scale.tune.fixed:
                assert a.method == CATALOG[name].reference, (name, scale_name, a.method)
    table3 = CATALOG["fedadmm/table3"].scales["ci"]
    assert {a.setting for a in table3.runs} == {"eta_l=0.01", "eta_l=0.1", "eta_l=0.2", "eta_l=0.5"}  # fedadmm.md A4
    assert {a.method for a in table3.arms} == {"FedSGD", "FedADMM", "FedADMM (Init II)", "FedAvg", "FedProx", "SCAFFOLD"}


def test_the_output_names_every_candidate_and_the_winner(tmp_path, monkeypatch):
    rep = tuned_rep(tmp_path, monkeypatch)
    runs = runs_of({("A", s): [curve(h, 0.6 if h else 0.4)] * 2 for s, h in (("eta_l=0.1", 6), ("eta_l=0.5", 4), ("eta_l=1", None))}
                   | {("B", s): [curve(h, 0.6)] * 2 for s, h in (("eta_l=0.1", 3), ("eta_l=0.5", 2), ("eta_l=1", 5))})
    table, claims, tuning = evaluate(rep, "ci", runs)
    text = report(rep, "ci", table, claims, tuning=tuning)
    assert "fewest rounds_to_0.5" in text and "ties broken by the higher mean of the last 10 logged test accuracies" in text
    grid = text.split("Equal tuning")[1].split("\n\n")[1]  # the grid: the table after the rule
    rows = [line for line in grid.splitlines() if line.startswith(("| A | g | eta_l", "| B | g | eta_l"))]
    assert len(rows) == 6 and all(any(f"| {s} |" in r for r in rows) for s in ("eta_l=0.1", "eta_l=0.5", "eta_l=1"))
    assert [r.split(" | ")[2] for r in rows if "**winner**" in r] == ["eta_l=0.5", "eta_l=0.5"]
    assert "| A | g | eta_l=1 | >12 |" in text
    csv = to_csv_frame(table, tuning)
    assert len(csv) == 4 + 4 and csv["chosen"].sum() == 4  # the winners' 2 metrics each, the 4 other candidates
    assert set(csv.loc[~csv["chosen"], "setting"]) == {"eta_l=0.1", "eta_l=1"}


def test_report_best_by_applies_the_same_rule():
    """`fedbench report --best-by rounds_to_0.5`: a config whose seeds did not all reach the target loses (the mean of
    the seeds that did reach it used to win), and a tie is broken by the last logged accuracies."""
    def run(eta, seed, hit, last):
        history = [(r, 0.1 if (hit is None or r < hit) else (0.5 if r <= hit else last)) for r in range(13)]
        return {"param:algorithm.name": "fedavg", "param:eta_l": eta, "param:seed": str(seed), "param:rounds": "12",
                "history": history, "final_accuracy": history[-1][1], "best_accuracy": max(a for _, a in history)}

    frame = pd.DataFrame([run("0.5", 0, 1, 0.9), run("0.5", 1, None, 0.1),  # fastest on seed 0, never on seed 1
                          run("0.1", 0, 3, 0.6), run("0.1", 1, 3, 0.6),
                          run("0.2", 0, 3, 0.7), run("0.2", 1, 3, 0.7)])  # ties 0.1 at round 3, ends higher
    table = build_table(frame, [], 0.5, None, "rounds_to_0.5")
    assert table["best config"].tolist() == ["eta_l=0.2"] and table["rounds_to_0.5"].tolist() == ["3.0 ± 0.0"]


def test_by_first_ranks_by_the_entrys_error_where_the_first_round_at_a_target_would_mislead(tmp_path, monkeypatch):
    """composite: eta 0.1 reaches 1e-4 first but stalls at 1e-6, eta 0.5 reaches it later and ends at 1e-13; the final
    error picks 0.5 (by_first), while the rounds-to-target rule would pick 0.1; the rounds metric's collapse still
    guards: eta 1 ends lowest but collapsed after reaching 1e-4 on one seed (above 10x 1e-4 at some round it ended at)."""
    def errors(hit: int, end: float, rounds: int = 12, collapse: bool = False) -> pd.DataFrame:
        r = np.arange(rounds + 1)
        e = np.where(r < hit, 1.0, np.where(r == hit, 1e-4, end))
        if collapse:
            e = np.where(r >= hit + 2, 1e-2, e)
        return pd.DataFrame({"round": r, "err": e})

    monkeypatch.setattr(entry_module, "PAPERS_DIR", tmp_path)
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "err.csv").write_text("method,group,metric,value\n")
    metrics = (rounds_to(1e-4, "err", mode="min"), Metric("final_err", "at", "err"))
    grid = candidates(axis("eta_l", (0.1, 0.5, 1.0)))
    spec = {"eta_l=0.1": [errors(2, 1e-6)] * 2, "eta_l=0.5": [errors(5, 1e-13)] * 2,
            "eta_l=1": [errors(3, 1e-15), errors(3, 1e-15, collapse=True)]}
    chosen = {}
    for by_first in (False, True):
        rep = Reproduction(name="fake/err", paper="fake", title="T", claim="c", metrics=metrics,
                           scales={"ci": Scale((Arm("A", "g"),), (0, 1), "cpu", "s",
                                               tune=Tune({"A": grid}, by="final_err", lower=True, by_first=by_first))},
                           check=lambda table, scale: [Claim("c", True)])
        runs = [RunResult("A", "g", s, 12, h, setting) for setting, hs in spec.items() for s, h in enumerate(hs)]
        tuning = evaluate(rep, "ci", runs)[2]
        chosen[by_first] = tuning.loc[tuning["chosen"], "setting"].tolist()
        if by_first:
            assert set(tuning["by"]) == {"final_err"} and "collapsed (seed 1)" in tuning.set_index("setting")["shown"]["eta_l=1"]
    assert chosen == {False: ["eta_l=0.1"], True: ["eta_l=0.5"]}


def test_fedsso_table1_ci_compares_both_methods_at_their_tuned_step_sizes():
    """Table 1 compares "optimal hyper-parameters": FedAvg is tuned as FedSSO is (it ran untuned at FedSSO's
    alpha = 0.01), over a grid that reaches alpha = 1 (88% in 6-8 rounds) and beyond."""
    scale = CATALOG["fedsso/table1"].scales["ci"]
    assert scale.tune is not None and set(scale.tune.grid) == {"FedAvg", "FedSSO"} and not scale.tune.fixed
    assert len(scale.tune.grid["FedAvg"]) == len(scale.tune.grid["FedSSO"]) == 6
    assert {"eta_l=1", "eta_l=3"} <= {" ".join(c) for c in scale.tune.grid["FedAvg"]}
    assert {c[1] for c in scale.tune.grid["FedSSO"]} == {"eta_g=1", "eta_g=3"}
    assert "not tuned" not in scale.note and "FedAvg alpha in {0.03, 0.1, 0.3, 1.0, 3.0, 10.0}" in scale.note
    assert scale.tune.by == "rounds_to_0.88" and scale.tune.by_first  # the claim's threshold, not 0.4 (round 1 for all)
