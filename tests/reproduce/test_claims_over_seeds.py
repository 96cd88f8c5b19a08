"""Issue 36's reading layer: claims judged over seeds (finding 5), collapses after the target (6), the tuning's
stability guard (7) and the checks widened to the paper's sentence (3, 4). Each test builds per-run histories
and pushes them through the path `fedbench reproduce` takes (compare.aggregate -> run.evaluate), without
training, except the executor test, which trains two cheap ci entries twice."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedbench.reproduce import compare
from fedbench.reproduce.catalog import load_catalog
from fedbench.reproduce.compare import (COLLAPSE_POINTS, RunResult, aggregate, comparison, over_seeds,
                                        seeds_needed, tuning_table)
from fedbench.reproduce.entry import Claim, Metric, rounds_to
from fedbench.reproduce.run import evaluate

CATALOG = load_catalog()


def curve(values) -> pd.DataFrame:
    return pd.DataFrame({"round": np.arange(len(values)), "test_accuracy": np.asarray(values, dtype=float)})


def rising(reach: int, rounds: int = 20, top: float = 0.95, fall_to: float | None = None) -> np.ndarray:
    """Accuracy 0.1 at round 0, reaching `top` at round `reach` and staying there (or falling to `fall_to` after)."""
    acc = np.minimum(top, 0.1 + (top - 0.1) * np.arange(rounds + 1) / reach)
    if fall_to is not None:
        acc[reach + 2:] = fall_to
    return acc


# ------------------------------------------------------------------------------------- over seeds
def test_seeds_needed_is_two_thirds_rounded_up():
    assert [seeds_needed(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 4]


def test_a_claim_holds_on_the_mean_and_two_thirds_of_the_seeds_and_names_the_seed_that_disagrees():
    mean = [Claim("A beats B", True, "A 3, B 5")]
    two = over_seeds(mean, {0: [Claim("A beats B", True, "A 3, B 5")], 1: [Claim("A beats B", False, "A 6, B 5")],
                            2: [Claim("A beats B", True, "A 2, B 5")]})[0]
    assert two.holds and "2/3 seeds hold" in two.detail and "seed 1 disagrees with the mean" in two.detail
    assert "seed 1 does not (A 6, B 5)" in two.detail  # the seed's own numbers
    one = over_seeds(mean, {0: [Claim("A beats B", True)], 1: [Claim("A beats B", False)], 2: [Claim("A beats B", False)]})[0]
    assert not one.holds and "seeds 1, 2 disagree" in one.detail
    # every seed holds but the mean does not: the mean is required too
    off = over_seeds([Claim("A beats B", False, "A 6, B 5")], {s: [Claim("A beats B", True)] for s in range(3)})[0]
    assert not off.holds
    # a claim a seed's check did not make counts as not holding there
    lost = over_seeds(mean, {0: [Claim("A beats B", True)], 1: [], 2: []})[0]
    assert not lost.holds and "not judged" in lost.detail


def fedsso_runs(fedsso_reach: dict[int, int | None]) -> list[RunResult]:
    """fedsso/table1 ci: FedAvg reaches 0.88 at round 10 on every seed; FedSSO at the given round per seed
    (None: never, it stays at 0.85)."""
    runs = []
    for seed, reach in fedsso_reach.items():
        runs.append(RunResult("FedAvg", "digits MCLR", seed, 20, curve(rising(10))))
        fedsso = rising(reach) if reach is not None else np.minimum(0.85, rising(5))
        runs.append(RunResult("FedSSO", "digits MCLR", seed, 20, curve(fedsso)))
    return runs


def test_a_weakened_seed_is_reported_and_two_weakened_seeds_flip_the_verdict():
    rep = CATALOG["fedsso/table1"]
    text = "digits MCLR (for MNIST MCLR): FedSSO reaches 0.88 first"
    held = {c.text: c for c in evaluate(rep, "ci", fedsso_runs({0: 3, 1: 3, 2: 3}))[1]}[text]
    assert held.holds and "every seed agrees" in held.detail
    one = {c.text: c for c in evaluate(rep, "ci", fedsso_runs({0: 3, 1: 15, 2: 3}))[1]}[text]
    assert one.holds and "seed 1 disagrees with the mean" in one.detail and "seed 1 does not (FedSSO 13, FedAvg 9)" in one.detail
    two = {c.text: c for c in evaluate(rep, "ci", fedsso_runs({0: 3, 1: 15, 2: None}))[1]}[text]
    assert not two.holds and "1/3 seeds hold" in two.detail


# ---------------------------------------------------------------------------------- collapses
def test_after_target_records_final_and_worst_and_flags_a_collapse():
    def after_target(metric, history):
        return compare.after_target(metric, compare.logged(history, metric.source))

    metric = rounds_to(0.8)
    final, worst, collapsed = after_target(metric, curve(rising(5, fall_to=0.0)))
    assert (final, worst, collapsed) == (0.0, 0.0, True)
    # a dip of less than COLLAPSE_POINTS below the target at the end is no collapse
    final, worst, collapsed = after_target(metric, curve(rising(5, fall_to=0.8 - COLLAPSE_POINTS + 0.01)))
    assert not collapsed and worst == pytest.approx(0.71)
    assert np.isnan(after_target(metric, curve(np.full(10, 0.5)))[0])  # never reached: nothing after it
    # an error (mode min) collapses when it ends more than 10x above its target
    err = Metric("rounds_to_0.001", "rounds", "test_accuracy", 1e-3, mode="min")
    assert after_target(err, curve([1.0, 1e-4, 2e-2]))[2] and not after_target(err, curve([1.0, 1e-4, 5e-3]))[2]


def test_the_comparison_flags_the_collapsed_seed_beside_the_rounds():
    rep = CATALOG["fedsso/table1"]
    runs = fedsso_runs({0: 3, 1: 3, 2: 3})
    runs[-1] = RunResult("FedSSO", "digits MCLR", 2, 20, curve(rising(3, fall_to=0.16)))  # reaches 0.88, ends at 16%
    table = comparison(rep, aggregate(rep, runs))
    row = table[(table["method"] == "FedSSO") & (table["metric"] == "rounds_to_0.88")].iloc[0]
    assert row["collapse"] == "seed 2" and "worst 0.16" in row["after_target"]
    assert (table[table["method"] == "FedAvg"]["collapse"] == "").all()


# ----------------------------------------------------------------------------- stability guard
def test_tuning_rejects_a_candidate_that_collapses_for_a_slower_stable_one():
    rep = CATALOG["fedsso/table1"]
    from fedbench.reproduce.entry import Scale, Tune

    scale = Scale((), (0,), "cpu", "", tune=Tune({"FedSSO": (("eta_l=1",), ("eta_l=0.1",))}))
    runs = [RunResult("FedSSO", "digits MCLR", 0, 20, curve(rising(2, fall_to=0.3)), "eta_l=1"),  # fastest, collapses
            RunResult("FedSSO", "digits MCLR", 0, 20, curve(rising(6)), "eta_l=0.1")]  # slower, stable
    from fedbench.reproduce.compare import tie_break

    tuning = tuning_table(rep, scale, aggregate(rep, runs, (tie_break(),)))
    chosen = tuning[tuning["chosen"]]
    assert list(chosen["setting"]) == ["eta_l=0.1"]
    assert "collapsed (seed 0)" in tuning[tuning["setting"] == "eta_l=1"]["shown"].iloc[0]
    # when every candidate collapses, the fastest still wins (the guard only ranks the stable ones first)
    runs[1] = RunResult("FedSSO", "digits MCLR", 0, 20, curve(rising(6, fall_to=0.3)), "eta_l=0.1")
    tuning = tuning_table(rep, scale, aggregate(rep, runs, (tie_break(),)))
    assert list(tuning[tuning["chosen"]]["setting"]) == ["eta_l=1"]


# ------------------------------------------------------------------- checks as wide as the paper
def drop_table(drops: dict[str, float]) -> pd.DataFrame:
    rows = [dict(method=m, group=g, metric="final_acc", mean=acc) for m, d in drops.items()
            for g, acc in (("c=0%", 90.0), ("c=100%", 90.0 - d))]
    return pd.DataFrame(rows)


def test_losac_fig2_needs_each_named_method_to_degrade_more_than_every_global_one():
    check = CATALOG["losac/fig2"].check
    paper = {"FedAvg": 20, "FedSaga": 25, "FedCM": 10, "SCAFFOLD": 2, "MimeSVRG": 3, "LoSAC": 1}
    assert all(c.holds for c in check(drop_table(paper), "ci"))
    # FedSaga as robust as SCAFFOLD: the larger FedAvg drop no longer carries it
    claims = {c.text.split(", ")[1].split(" ")[0]: c.holds for c in check(drop_table({**paper, "FedSaga": 2}), "ci")}
    assert claims["FedAvg"] and not claims["FedSaga"]
    # FedCM degrading like FedAvg is not "less"
    assert not all(c.holds for c in check(drop_table({**paper, "FedCM": 30}), "ci"))


def test_losac_fig7_needs_the_smallest_recovery_error_too():
    check = CATALOG["losac/fig7"].check
    rows = []
    for method, err, rank in (("LoSAC-Prox", 0.170, 8), ("SCAFFOLD-Prox", 0.122, 11)):  # the review's measurement
        rows += [dict(method=method, group="rank=8", metric="final_rec_err", mean=err, values=[err]),
                 dict(method=method, group="rank=8", metric="final_rank", mean=rank, values=[rank])]
    claims = {c.text: c.holds for c in check(pd.DataFrame(rows), "ci")}
    assert claims["rank 8: LoSAC-Prox recovers the exact rank on every seed"]
    assert not claims["rank 8: LoSAC-Prox has the smallest recovery error"]


def test_fedadmm_table3_ci_speedup_is_the_columns_130x_not_7_6x():
    rep = CATALOG["fedadmm/table3"]
    group = "FMNIST (1000) IID proxy"
    runs = []
    for seed in (0, 1, 2):
        runs += [RunResult("FedSGD", group, seed, 300, curve(np.full(301, 0.5))),  # never reaches 80% in 300 rounds
                 RunResult("FedADMM", group, seed, 30, curve(rising(12, 30))),
                 RunResult("FedADMM (Init II)", group, seed, 30, curve(rising(14, 30)))]
        runs += [RunResult(b, group, seed, 30, curve(rising(20, 30))) for b in ("FedAvg", "FedProx", "SCAFFOLD")]
    claims = evaluate(rep, "ci", runs)[1]

    def claim(start: str) -> Claim:
        return next(c for c in claims if c.text.startswith(start))

    assert claim(f"{group}: FedADMM needs the fewest rounds").holds
    speed = claim("FedADMM reaches 80% at least 130x faster than FedSGD")
    assert not speed.holds and "speed-up >=30" in speed.detail  # 300 / 10: it held against 7.6x
    assert not claim("FedADMM needs at least 70% fewer rounds than the best baseline").holds  # 1 - 10/18 = 44%


def test_every_entry_quotes_its_paper_and_a_narrower_check_says_so_in_its_line():
    from fedbench.reproduce.run import claim_line

    assert all(rep.quote.count('"') >= 2 or "spec's reading" in rep.quote or rep.quote.startswith("Table")
               for rep in CATALOG.values()), [n for n, r in CATALOG.items() if not r.quote]
    line = claim_line(Claim("A beats B", True, "A 1, B 2", "against B only"), "ci")
    assert line == "- [x] A beats B NARROWER THAN THE PAPER: against B only. (A 1, B 2)"


def test_a_derived_paper_cell_is_marked():
    rep = CATALOG["fedspeed/fig4_2a"]
    assert ("FedAvg", "CIFAR-10 IID", "best_acc") in rep.derived_cells()
    runs = [RunResult(m, g, 0, 10, curve(rising(5, 10))) for m in ("FedAvg", "FedSpeed") for g in ("CIFAR-10 IID",)]
    table = comparison(rep, aggregate(rep, runs))
    cell = table[(table["method"] == "FedAvg")]["paper"].iloc[0]
    assert cell == "82.4 (derived, not printed)"


# ------------------------------------------------------------------------------ executors agree
@pytest.mark.slow  # trains two cheap ci entries twice each (~1 min on 2 cores): the one check that needs training
@pytest.mark.parametrize("name", ["fedsso/table1", "fedsso/table2"])
def test_a_verdict_does_not_change_between_executors(name, tmp_path):
    from fedbench.reproduce.run import reproduce

    verdicts = {}
    for executor in ("loop", "auto"):
        extra = (f"tracking.uri=sqlite:///{tmp_path}/{executor}.db", "engine.threads=1", "tracking.artifacts=false",
                 "tracking.checkpoint_every=0", f"engine.executor={executor}")
        outcome = reproduce(CATALOG[name], "ci", extra, outputs=tmp_path / executor)
        verdicts[executor] = [(c.text, c.holds) for c in outcome.claims]
    assert verdicts["loop"] == verdicts["auto"]
