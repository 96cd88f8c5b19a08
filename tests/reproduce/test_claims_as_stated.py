"""Issue 40 (sections 3-7): a claim judged by its own quantifier, verdicts within one seed of flipping judged on 5
seeds, the seeds of a reproduction chosen on the command line (every override applied or refused), collapses after
the target round shown even when the run recovers, the spec's proxies labelled and counted apart, the HTML page
carrying what the Markdown carries, and the FedADMM arms and Fig. 6 criteria as the paper states them."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from fedbench.cli.app import app as cli_app
from fedbench.config.preflight import checked_compose
from fedbench.core.errors import ConfigError
from fedbench.reproduce import catalog as catalog_module
from fedbench.reproduce.catalog import load_catalog
from fedbench.reproduce.compare import RunResult, aggregate, comparison, over_seeds, tuning_table, within_one_seed
from fedbench.reproduce.entry import Claim, Metric, paper_count, rounds_to
from fedbench.reproduce.run import collapses, job_overrides, outcome_section, parse_seeds, report, reproduce
from fedbench.tracking.page import write_page

from tests.reproduce.test_reproduce import fake_rep, tiny_conf  # noqa: F401 - the fixture

CATALOG = load_catalog()


def curve(values) -> pd.DataFrame:
    return pd.DataFrame({"round": np.arange(len(values)), "test_accuracy": np.asarray(values, dtype=float)})


def verdicts(*held: bool, text: str = "A beats B") -> dict[int, list[Claim]]:
    return {s: [Claim(text, h)] for s, h in enumerate(held)}


# ------------------------------------------------------------------ a claim judged by its own quantifier
def test_every_seed_claim_needs_every_seed_and_a_median_claim_stands_on_the_median():
    text = "A beats B on every seed"
    assert not over_seeds([Claim(text, True)], verdicts(True, False, True, text=text))[0].holds  # 2/3 used to pass
    assert over_seeds([Claim(text, True)], verdicts(True, True, True, text=text))[0].holds
    # a median over 5 seeds holds with 3 of them; the mean's 2/3 rule would need 4
    median = "A's median error <= 1e-8"
    judged = over_seeds([Claim(median, True, "median 3e-9")], verdicts(True, True, True, False, False, text=median))[0]
    assert judged.holds and "judged on the median of the seeds" in judged.detail
    assert not over_seeds([Claim("A beats B", True)], verdicts(True, True, True, False, False))[0].holds  # a mean: 4 of 5


def test_a_verdict_one_seed_could_flip_is_flagged():
    # losac/fig6 SCAFFOLD: e_100 > e_0 held on 2 of 3 seeds (1.028, 1.006, 0.996): one seed from failing
    assert within_one_seed([Claim("A beats B", True)], verdicts(True, True, False)) == ["A beats B"]
    assert within_one_seed([Claim("A beats B", True)], verdicts(True, True, True)) == []
    assert within_one_seed([Claim("A beats B", False)], verdicts(True, False, False)) == ["A beats B"]
    assert within_one_seed([Claim("A beats B", False)], verdicts(False, False, False)) == []
    every = "A beats B on every seed"
    assert within_one_seed([Claim(every, True)], verdicts(True, True, True, text=every)) == [every]


@pytest.mark.slow  # trains a tiny grid on 5 seeds (~60 s on the shared 2-core machine)
def test_a_reproduction_within_one_seed_of_flipping_runs_five_seeds(tiny_conf, monkeypatch):  # noqa: F811
    """The check holds on the mean and on every seed but seed 2: 2/3 on seeds 0-2, within one seed of flipping;
    the grid then runs seeds 3 and 4 and judges on 5 (4/5 hold)."""
    def check(table, scale):
        seeds = set(table["seed_ids"].iloc[0])
        return [Claim("B reaches 50% no later than A", seeds != {2}, f"seeds {sorted(seeds)}")]

    rep = fake_rep(tiny_conf / "papers", monkeypatch, check)
    uri = f"tracking.uri=sqlite:///{tiny_conf}/mlflow.db"
    outcome = reproduce(rep, "ci", (uri, "engine.threads=1", "tracking.checkpoint_every=0"),
                        outputs=tiny_conf / "outputs", seeds=(0, 1, 2))
    assert sorted(set(outcome.table["n"])) == [5]
    assert "Seeds: 0-4 (the scale's 0-2, extended to 5 because a verdict was within one seed of flipping" in outcome.markdown
    assert outcome.claims[0].holds and "4/5 seeds hold" in outcome.claims[0].detail


# ------------------------------------------------------------------ seeds on the command line
def test_seed_override_is_refused_in_one_line_and_seeds_are_chosen_with_an_option(monkeypatch):
    import fedbench.reproduce.run as run_module

    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "fedbench.cli", "reproduce", "losac/fig6", "--scale", "ci", "seed=5"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and result.stderr.startswith("error: seed=5")
    assert "--seeds" in result.stderr
    taken = {}
    outcome = run_module.Outcome(pd.DataFrame(), [Claim("holds", True)], "| table |", [])

    def fake(rep, scale, extra, seeds=None, jobs=1):
        taken["seeds"] = seeds
        return outcome

    monkeypatch.setattr(run_module, "reproduce", fake)
    assert CliRunner().invoke(cli_app, ["reproduce", "losac/fig6", "--seeds", "0-4"]).exit_code == 0
    assert taken["seeds"] == (0, 1, 2, 3, 4)
    assert parse_seeds("5") == (5,) and parse_seeds("0-2,7") == (0, 1, 2, 7)
    for item in ("experiment=fedadmm/fig6", "scale=losac/fig6/ci", "+tracking.experiment=x"):  # a second one was ignored
        with pytest.raises(ConfigError, match=f"^{re.escape(item)}: a reproduction sets"):
            run_module.refuse_own_keys(("engine.threads=1", item))
    run_module.refuse_own_keys(("engine.threads=1", "rounds=3", "seed_offset=1"))  # applied to every job
    bad = CliRunner().invoke(cli_app, ["reproduce", "losac/fig6", "--seeds", "3-1"])
    assert isinstance(bad.exception, ConfigError) and str(bad.exception).startswith("--seeds '3-1'")


# ------------------------------------------------------------------ collapses after the target round
def fedsso_dip() -> tuple[list[RunResult], Metric]:
    """A run that reaches 0.8 at round 5, falls to accuracy 0.000 at round 15 and recovers (the FedSSO seed)."""
    metric = rounds_to(0.8, offset=1)
    acc = np.minimum(0.9, 0.1 + 0.8 * np.arange(31) / 5)
    dip = acc.copy()
    dip[15] = 0.0
    return [RunResult("FedSSO", "g", 0, 30, curve(acc)), RunResult("FedSSO", "g", 1, 30, curve(dip))], metric


def test_a_collapse_after_the_target_round_is_shown_even_when_the_run_recovers(tmp_path, monkeypatch):
    runs, metric = fedsso_dip()
    rep = fake_rep(tmp_path, monkeypatch)
    from dataclasses import replace

    rep = replace(rep, metrics=(metric,))
    measured = aggregate(rep, runs)
    table = comparison(rep, measured)
    assert table["collapse"].iloc[0] == "seed 1 transient: 0 at round 15, recovered"
    assert any("seed 1 transient: 0 at round 15" in line for line in collapses(table))
    # shown, not ranked: the tuning's stability guard still looks at the end of the run
    tuned = aggregate(rep, [replace(r, setting="eta_l=0.1") for r in runs])
    from fedbench.reproduce.entry import Tune

    scale = replace(rep.scales["ci"], tune=Tune({"FedSSO": (("eta_l=0.1",),)}))
    grid = tuning_table(rep, scale, tuned)
    assert "transient collapse (seed 1 round 15: 0)" in grid["shown"].iloc[0] and grid["chosen"].iloc[0]


# ------------------------------------------------------------------ every page carries what the Markdown carries
def test_the_html_page_carries_the_quote_the_narrower_notes_the_collapses_and_the_rounds_convention(tmp_path, monkeypatch):
    from dataclasses import replace

    runs, metric = fedsso_dip()
    rep = fake_rep(tmp_path, monkeypatch)
    rep = replace(rep, metrics=(metric,), quote='"FedSSO is fast" (Table 1)')
    table = comparison(rep, aggregate(rep, runs))
    claims = [Claim("FedSSO reaches 80% first", True, "5 rounds", narrower="b = 20 only")]
    markdown = report(rep, "ci", table, claims)
    html = write_page(tmp_path / "page.html", "t", [outcome_section(rep, "ci", table, claims, None, None, None, None)])
    import html as html_module

    page = html_module.unescape(html.read_text())
    for text in ("Paper: \"FedSSO is fast\" (Table 1)", "NARROWER THAN THE PAPER: b = 20 only", "Collapses:",
                 "seed 1 transient: 0 at round 15", "rounds_to_0.8 = r* - 1, the paper's convention",
                 "run summaries and figures show r*"):
        assert text in markdown, text
        assert text in page, text


# ------------------------------------------------------------------ the spec's proxies, labelled and counted apart
def test_losac_fig6_weaker_form_is_a_labelled_proxy_not_a_held_claim_of_the_paper():
    rows = [dict(method=m, group="proxy", metric="dlg_error_ratio", mean=v)
            for m, v in (("DSGD", 0.7), ("MimeSVRG", 0.75), ("FedAvg", 0.8), ("SCAFFOLD", 1.01), ("LoSAC", 0.99))]
    claims = CATALOG["losac/fig6"].check(pd.DataFrame(rows), "ci")
    proxies = [c for c in claims if "gains less than on an exact gradient" in c.text]
    assert len(proxies) == 3 and all(c.is_proxy and c.holds for c in proxies)
    assert all(c.text.startswith("not the paper's claim (the spec's proxy") for c in proxies)
    assert paper_count(claims) == "3 / 5 (+ spec proxies 3 / 3)"  # DSGD, MimeSVRG, SCAFFOLD of the paper's five


# ------------------------------------------------------------------ FedADMM: the arms run what their names say
def algorithm_of(name: str, scale_name: str, method: str):
    rep = CATALOG[name]
    scale = rep.scales[scale_name]
    arm = next(a for a in scale.runs if a.method == method)
    return checked_compose(job_overrides(rep, scale, arm)).algorithm


@pytest.mark.parametrize("scale_name", ["ci", "fmnist"])
def test_fedadmm_table3_runs_algorithm_1_beside_initialization_ii(scale_name):
    assert algorithm_of("fedadmm/table3", scale_name, "FedADMM").local_init == "local"  # stored w_i, warm start
    assert algorithm_of("fedadmm/table3", scale_name, "FedADMM (Init II)").local_init == "global"


def test_fedadmm_as_released_trains_a_fixed_E_and_names_its_id_ordered_chain():
    from fedbench.reproduce.fedadmm import AS_RELEASED

    released = algorithm_of("fedadmm/table3", "fmnist", AS_RELEASED)
    assert released.chained and not released.hetero_epochs
    assert "id order" in AS_RELEASED


def fig6_table(values: dict[tuple[str, str], tuple[float, float, float, float]]) -> pd.DataFrame:
    """(method, panel) -> accuracy over rounds 1-10, 21-40, 41-60, 81-100."""
    rows = []
    for (method, panel), numbers in values.items():
        for metric, v in zip(("acc_r1_10", "acc_r21_40", "acc_r41_60", "acc_last20"), numbers):
            rows.append(dict(method=method, group=f"FMNIST {panel}", metric=metric, mean=v))
    return pd.DataFrame(rows)


def test_fedadmm_fig6_a_gap_of_two_means_is_no_stall_and_the_iid_panel_is_checked():
    claims_of = lambda table: {c.text.split(" (")[0]: c for c in CATALOG["fedadmm/fig6"].check(table, "ci")}  # noqa: E731
    base = {("eta=0.5", "IID"): (60, 80, 84, 85), ("eta=1", "IID"): (70, 81, 84.5, 85), ("eta=1.5", "IID"): (71, 81, 85, 85),
            ("eta=0.5", "non-IID"): (40, 60, 70, 72), ("eta=1", "non-IID"): (45, 64, 72, 74),
            ("eta=1 constant", "non-IID"): (45, 64, 72, 73), ("eta=1.5 constant", "non-IID"): (45, 60, 66, 67)}
    # eta = 1.5 six points below eta = 1 but still climbing (+6 over rounds 21-40 -> 41-60): slower, not stalled
    climbing = claims_of(fig6_table({**base, ("eta=1.5", "non-IID"): (45, 60, 66, 70)}))
    assert not climbing["non-IID: eta = 1.5 stalls"].holds
    stalled = claims_of(fig6_table({**base, ("eta=1.5", "non-IID"): (45, 65.8, 66, 70)}))
    assert stalled["non-IID: eta = 1.5 stalls"].holds
    assert stalled["IID: every eta performs alike"].holds and stalled["IID: eta = 0.5 is slower at the initial stages"].holds
    assert stalled["IID: eta = 1 performs consistently"].holds and stalled["non-IID: eta = 1 performs consistently"].holds
    behind = claims_of(fig6_table({**base, ("eta=1", "IID"): (70, 75, 79, 80), ("eta=1.5", "non-IID"): (45, 65.8, 66, 70)}))
    assert not behind["IID: eta = 1 performs consistently"].holds and not behind["IID: every eta performs alike"].holds
