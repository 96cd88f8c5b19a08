"""`fedbench reproduce`: the catalog against the preset files and the paper numbers, the comparison
arithmetic on tiny fake inputs, one end-to-end run, and the ci scale of every CPU-runnable reproduction."""

from __future__ import annotations

import math
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import fedbench.config.compose
import fedbench.reproduce.catalog as catalog_module
import fedbench.reproduce.entry as entry_module
from fedbench.cli.app import app as cli_app
from fedbench.reproduce.catalog import load_catalog
from fedbench.reproduce.entry import Arm, Claim, Metric, Reproduction, Scale, rounds_to
from fedbench.reproduce import compare
from fedbench.reproduce.compare import RunResult, aggregate, comparison, format_rounds, parse_paper, speedup
from fedbench.reproduce.run import missing, reproduce
from fedbench.core.errors import ConfigError

CATALOG = load_catalog()


# ------------------------------------------------------------------------------------------ catalog
def test_catalog_covers_the_five_papers():
    papers = {rep.paper for rep in CATALOG.values()}
    assert papers == {"losac", "composite", "fedadmm", "fedspeed", "fedsso"}
    for rep in CATALOG.values():
        assert rep.name.startswith(rep.paper + "/") and "full" in rep.scales and rep.claim and rep.metrics


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_preset_file_matches_catalog(name):
    rep = CATALOG[name]
    path = fedbench.config.compose.CONF_DIR / "experiment" / f"{rep.preset_path}.yaml"
    if not path.exists() and rep.preset_path in OWNED_ELSEWHERE:
        pytest.skip(f"{path.name} comes with the {OWNED_ELSEWHERE[rep.preset_path]} branch")
    text = path.read_text()
    assert text.startswith("# @package _global_"), path
    assert "override /" in text or "defaults:\n  - " in text, path
    for scale in rep.scales.values():
        assert len(scale.seeds) >= 1 and scale.device in ("cpu", "gpu") and scale.compute
        assert len({a.slug for a in scale.arms}) == len(scale.arms), "arms must have distinct (method, group)"
        assert len({a.slug for a in scale.runs}) == len(scale.runs), "tuning candidates must have distinct slugs"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CATALOG))
def test_arms_compose_and_validate(name):
    """The preset plus each arm's overrides is a valid config (one arm per algorithm and data set)."""
    from hydra import compose, initialize_config_dir

    from fedbench.config.validate import validate
    from fedbench.reproduce.run import job_overrides

    rep = CATALOG[name]
    checked = 0
    for scale_name, scale in rep.scales.items():
        if missing(rep, scale_name):
            continue
        firsts = {}
        for arm in scale.runs:  # each tuning candidate's overrides compose too
            key = tuple(o for o in arm.overrides if o.startswith(("algorithm=", "dataset=", "model=")))
            firsts.setdefault((key, arm.preset), arm)
        firsts.update({("candidate", a.setting): a for a in scale.runs if a.setting})
        for arm in firsts.values():
            with initialize_config_dir(config_dir=str(fedbench.config.compose.CONF_DIR), version_base=None):
                cfg = compose("config", overrides=[*job_overrides(rep, scale, arm), f"seed={scale.seeds[0]}"])
            validate(cfg)
            checked += 1
    if not checked:
        pytest.skip(f"{name} needs {', '.join(missing(rep, 'full'))}")


# composite/fig2 (with its FedMid variant) and composite/fig3 are written by the composite branch
OWNED_ELSEWHERE = {"composite/fig2": "composite", "composite/fig3": "composite"}


def test_every_scale_file_belongs_to_one_scale_of_the_catalog():
    """conf/scale/<paper>/<table>/<scale>.yaml: the settings a scale shares, named after its reproduction and scale."""
    configs = [(name, scale_name, scale.config) for name, rep in CATALOG.items() for scale_name, scale in rep.scales.items()
               if scale.config]
    assert all(config == f"{name}/{scale_name}" for name, scale_name, config in configs)
    root = fedbench.config.compose.CONF_DIR / "scale"
    files = sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))
    assert files == sorted(config for _, _, config in configs)
    for path in root.rglob("*.yaml"):
        assert path.read_text().startswith("# @package _global_"), path


def test_a_scale_file_composes_to_its_former_override_strings():
    """fedspeed/table4_2's ci settings (group choices, an interpolation, a key added to the model) were
    override strings before they became conf/scale/fedspeed/table4_2/ci.yaml: the same config."""
    from omegaconf import OmegaConf

    from fedbench.config.compose import compose
    from fedbench.reproduce.run import job_overrides

    rep = CATALOG["fedspeed/table4_2"]
    scale = rep.scales["ci"]
    arm = next(a for a in scale.arms if a.method == "FedSpeed")
    former = ("dataset=make_classification", "dataset.seed=${seed}", "partition=dirichlet_balanced", "partition.alpha=0.6",
              "model=mlp_2nn", "++model.hidden=64", "num_clients=100", "clients_per_round=10", "batch_size=20",
              "local_epochs=5", "eta_l=0.1", "eval_every=5", "rounds=150")
    now = compose([*job_overrides(rep, scale, arm), "seed=1"])
    before = compose([f"experiment={rep.preset_path}", *former, *arm.overrides, "seed=1"])
    assert "scale=fedspeed/table4_2/ci" in job_overrides(rep, scale, arm)
    assert OmegaConf.to_container(now, resolve=True) == OmegaConf.to_container(before, resolve=True)
    assert now.dataset.seed == 1 and now.model.hidden == 64 and now.dataset.name == "make_classification"


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_entry_has_paper_numbers_for_every_full_scale_cell(name):
    rep = CATALOG[name]
    paper = rep.paper_numbers()
    cells = {(a.method, a.group, m.name) for a in rep.scales["full"].arms for m in rep.metrics if m.applies(a.group)}
    assert cells == set(map(tuple, paper[["method", "group", "metric"]].to_numpy()))
    # figures have no printed values (composite's were lost altogether); tables must have some
    assert (paper["value"] != "").any() or "Fig" in rep.title or rep.blocked or rep.paper == "composite", \
        f"{name}: a table without a single published number"


def test_transcribed_numbers_spot_checks():
    """A few cells read off the specs' transcriptions, so that a shifted column cannot go unnoticed."""
    def cell(name, method, group, metric):
        frame = CATALOG[name].paper_numbers()
        row = frame[(frame.method == method) & (frame.group == group) & (frame.metric == metric)]
        return row["value"].item()

    assert cell("losac/table2", "LoSAC (M=5)", "ESR T=4", "rounds_to_0.85") == "206"
    assert cell("losac/table2", "SCAFFOLD (M=3)", "HAR T=6", "acc@500") == "92.40"
    assert cell("fedadmm/table3", "FedADMM", "FMNIST (1000) IID", "rounds_to_0.8") == "3"
    assert cell("fedadmm/table3", "FedProx", "MNIST (100) non-IID", "rounds_to_0.97") == "100+"
    assert cell("fedspeed/table4_4", "FedSpeed", "C10 (100-10%) DIR", "rounds_to_0.85") == "380"
    assert cell("fedsso/table1", "FedSSO", "EMNIST CNN", "rounds_to_0.83") == "191"


# ------------------------------------------------------------------------------ comparison arithmetic
def hist(acc):
    return pd.DataFrame({"round": np.arange(1, len(acc) + 1), "test_accuracy": acc})


def test_measure_rounds_to_target_and_values():
    def measure(metric, history, rounds):
        return compare.measure(metric, compare.logged(history, metric.source), rounds)

    h = hist([0.2, 0.5, 0.7, 0.9])
    assert measure(rounds_to(0.7), h, 4) == 3
    assert measure(rounds_to(0.95), h, 4) == math.inf
    assert measure(rounds_to(0.5, offset=1), h, 4) == 1  # FedSSO's r* - 1
    assert measure(rounds_to(0.4, mode="min"), h, 4) == 1
    assert measure(Metric("a", "at", at=2, scale=100), h, 4) == 50
    assert measure(Metric("a", "at"), h, 4) == 0.9
    assert measure(Metric("a", "mean_last", last=2), h, 4) == pytest.approx(0.8)
    assert measure(Metric("a", "mean_last", last=2, at=3), h, 4) == pytest.approx(0.6)  # rounds 2-3 (FedADMM Fig. 6)
    assert math.isnan(measure(Metric("a", "at", "rec_err"), h, 4))


def test_rounds_formatting_uses_the_papers_greater_than_R():
    assert format_rounds(math.inf, math.nan, 0, 3, 100) == ">100"
    assert format_rounds(math.inf, math.nan, 2, 3, 100) == ">100 (2/3)"
    assert format_rounds(12.0, 1.0, 3, 3, 100) == "12.0 ± 1"
    assert parse_paper("100+") == math.inf and parse_paper("-") == math.inf and parse_paper(">200") == math.inf
    assert parse_paper("94.37%") == 94.37 and math.isnan(parse_paper(""))


def test_speedup():
    assert speedup(64, 56, 100)[1] == "1.14×"  # LoSAC Table 2, MNIST T = 2, M = 2
    assert speedup(math.inf, 25, 100) == (4.0, ">4.00×")  # the reference never reached the target
    assert math.isnan(speedup(60, math.inf, 100)[0])


def fake_rep(tmp_path, monkeypatch, check=None) -> Reproduction:
    """Two methods x two groups, with a paper CSV in tmp_path."""
    monkeypatch.setattr(entry_module, "PAPERS_DIR", tmp_path)
    (tmp_path / "fake").mkdir(parents=True, exist_ok=True)
    (tmp_path / "fake" / "t.csv").write_text(
        "method,group,metric,value,note\n"
        "A,g1,rounds_to_0.5,40,\nB,g1,rounds_to_0.5,20,\nA,g1,acc,90.0,\nB,g1,acc,95.5,\n"
        "A,g2,rounds_to_0.5,100+,\nB,g2,rounds_to_0.5,50,\nA,g2,acc,80,\nB,g2,acc,,figure\n")
    arms = tuple(Arm(m, g, (f"algorithm={a}",)) for g in ("g1", "g2") for m, a in (("A", "fedsgd"), ("B", "fedavg")))
    return Reproduction(
        name="fake/t", paper="fake", title="Table T", claim="B is faster than A",
        metrics=(rounds_to(0.5), Metric("acc", "at", scale=100)), reference="A",
        scales={"ci": Scale(arms, (0,), "cpu", "seconds", config="fake/t/ci"), "full": Scale(arms, (0,), "cpu", "s")},
        check=check or (lambda table, scale: [Claim("B reaches 50% no later than A", True)]), preset="tiny/t")


def test_comparison_table_shape_and_speedups(tmp_path, monkeypatch):
    rep = fake_rep(tmp_path, monkeypatch)
    runs = [RunResult("A", "g1", s, 4, hist([0.1, 0.3, 0.5, 0.6])) for s in (0, 1)]
    runs += [RunResult("B", "g1", 0, 4, hist([0.5, 0.6, 0.7, 0.8])), RunResult("B", "g1", 1, 4, hist([0.2, 0.5, 0.7, 0.9]))]
    runs += [RunResult("A", "g2", s, 4, hist([0.1, 0.2, 0.3, 0.4])) for s in (0, 1)]
    runs += [RunResult("B", "g2", 0, 4, hist([0.1, 0.6, 0.6, 0.6])), RunResult("B", "g2", 1, 4, hist([0.1, 0.2, 0.3, 0.4]))]
    table = comparison(rep, aggregate(rep, runs)).set_index(["method", "group", "metric"])
    assert len(table) == 8  # 2 methods x 2 groups x 2 metrics
    b1 = table.loc[("B", "g1", "rounds_to_0.5")]
    assert (b1["paper"], b1["measured"], b1["mean"], b1["std"]) == ("20", "1.5 ± 0.71", 1.5, pytest.approx(math.sqrt(0.5)))
    assert (b1["paper_speedup"], b1["speedup"]) == ("2.00×", "2.00×")  # 40/20 and 3/1.5
    assert table.loc[("A", "g2", "rounds_to_0.5")].measured == ">4"
    assert table.loc[("B", "g2", "rounds_to_0.5")].measured == ">4 (1/2)"
    assert table.loc[("A", "g1", "acc")].measured == "60" and table.loc[("A", "g1", "acc")].paper == "90.0"
    assert table.loc[("B", "g2", "acc")].paper == ""


# ------------------------------------------------------------------------------------ end to end
@pytest.fixture
def tiny_conf(tmp_path, monkeypatch):
    """A copy of conf/ with a digits preset for the fake reproduction."""
    conf = tmp_path / "conf"
    shutil.copytree(fedbench.config.compose.CONF_DIR, conf)
    (conf / "experiment" / "tiny").mkdir(parents=True)
    (conf / "experiment" / "tiny" / "t.yaml").write_text(
        "# @package _global_\n# fake reproduction for the tests\ndefaults:\n  - override /dataset: digits\n"
        "  - override /algorithm: fedavg\n\nnum_clients: 4\nclients_per_round: 4\nrounds: 5\ntargets: [0.5]\n")
    (conf / "scale" / "fake" / "t").mkdir(parents=True)
    (conf / "scale" / "fake" / "t" / "ci.yaml").write_text("# @package _global_\nrounds: 3\n")
    monkeypatch.setattr(fedbench.config.compose, "CONF_DIR", conf)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_cli_runs_the_grid_saves_the_comparison_and_exits_1_on_a_failed_claim(tiny_conf, monkeypatch):
    seen = {}

    def check(table, scale):
        seen["table"] = table
        return [Claim("the fake claim", False)]

    rep = fake_rep(tiny_conf / "papers", monkeypatch, check)
    monkeypatch.setitem(catalog_module.REPRODUCTIONS, rep.name, rep)
    import fedbench.reproduce.run as run_module
    from mlflow.tracking import MlflowClient

    trained, reads = [], pytest.MonkeyPatch()

    def runs_then_no_reading_back(*args, **kwargs):  # the comparison uses the histories the runs returned
        results = run_grid(*args, **kwargs)
        trained.append(results)
        for method in ("search_runs", "get_metric_history", "get_run"):
            reads.setattr(MlflowClient, method, lambda *a, **k: pytest.fail("a run was read back from MLflow"))
        return results

    run_grid = run_module.run_grid
    monkeypatch.setattr(run_module, "run_grid", runs_then_no_reading_back)
    result = CliRunner().invoke(cli_app, ["reproduce", rep.name, "--scale", "ci",
                                                   f"tracking.uri=sqlite:///{tiny_conf}/mlflow.db", "engine.threads=1"])
    assert result.exit_code == 1, result.output
    assert "| method | group | metric | paper | measured |" in result.output
    assert "[ ] the fake claim" in result.output
    out = tiny_conf / "outputs" / "reproduce" / "fake" / "t" / "ci"
    csv = pd.read_csv(out / "comparison.csv")
    assert len(csv) == 8 and set(csv["n"]) == {1}  # 4 arms x 2 metrics, one seed
    assert (out / "figure.png").stat().st_size > 0 and (out / "comparison.md").exists()
    page = (out / "page.html").read_text()  # its results page, with the claim's verdict below the paper's scale
    assert "does not hold at this scale</span>:\n      the fake claim" in page and "data:image/png;base64," in page
    measured = re.search(r"Compute: measured (\d+) s on a \d+-core CPU \(catalog estimate: ", (out / "comparison.md").read_text())
    assert measured and 0 <= int(measured.group(1)) < 600
    table = seen["table"]
    assert ((table["mean"] >= 0) | np.isinf(table["mean"])).all()
    reads.undo()
    [(runs, failures)] = trained
    assert not failures and [(r.method, r.group, r.rounds) for r in runs] == [(a.method, a.group, 3) for a in rep.scales["ci"].arms]

    client = MlflowClient(f"sqlite:///{tiny_conf}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name(rep.name).experiment_id])
    assert len(runs) == 5  # 4 arms x 1 seed + the comparison run
    comparison_run = next(r for r in runs if r.info.run_name.endswith("-comparison"))
    assert comparison_run.data.tags["claims_hold"] == "false"
    assert {a.path for a in client.list_artifacts(comparison_run.info.run_id)} >= {"comparison.csv", "comparison.md", "figure.png"}


def test_a_failing_job_fails_alone_and_the_grid_goes_on(tiny_conf, monkeypatch):
    rep = fake_rep(tiny_conf / "papers", monkeypatch)
    # A: a step within float32's range (eta_l=1e300 is refused before any work) whose first update overflows:
    # it diverges at round 1, beside B in the same lane group
    arms = (Arm("A", "g1", ("algorithm=fedavg", "eta_l=3e38")), Arm("B", "g1", ("algorithm=fedavg",)))
    rep = Reproduction(**{**rep.__dict__, "scales": {"ci": Scale(arms, (0,), "cpu", "s", config="fake/t/ci")}})
    outcome = reproduce(rep, "ci", (f"tracking.uri=sqlite:///{tiny_conf}/mlflow.db", "engine.threads=1"),
                        outputs=tiny_conf / "outputs")
    table = outcome.table.set_index(["method", "group", "metric"])
    assert table.loc[("B", "g1", "acc")]["n"] == 1 and ("A", "g1", "acc") not in table.index  # measured: what ran to the end
    failed = outcome.claims[-1]
    assert not failed.holds and failed.detail.startswith("failed: A [g1] seed 0: ")


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_a_tuned_grid_trains_every_candidate_and_reports_the_winners(tiny_conf, monkeypatch):
    """Scale.tune end to end: every method's candidates train (as lanes of one program), the comparison and the
    claims use each method's winner, the output lists every candidate."""
    from fedbench.reproduce.entry import Tune, axis, candidates

    seen = {}

    def check(table, scale):
        seen["table"] = table
        return [Claim("checked on winners", len(table) == 4)]

    rep = fake_rep(tiny_conf / "papers", monkeypatch, check)
    grid = candidates(axis("eta_l", (0.05, 0.5)))
    arms = tuple(a for a in rep.scales["ci"].arms if a.group == "g1")
    rep = Reproduction(**{**rep.__dict__, "scales": {"ci": Scale(arms, (0,), "cpu", "s", config="fake/t/ci",
                                                                  tune=Tune({"A": grid, "B": grid}))}})
    outcome = reproduce(rep, "ci", (f"tracking.uri=sqlite:///{tiny_conf}/mlflow.db", "engine.threads=1"),
                        outputs=tiny_conf / "outputs")
    assert outcome.holds, outcome.markdown
    assert set(seen["table"]["setting"]) <= {"eta_l=0.05", "eta_l=0.5"} and len(set(seen["table"]["method"])) == 2
    for method in ("A", "B"):
        for setting in ("eta_l=0.05", "eta_l=0.5"):
            assert f"| {method} | g1 | {setting} |" in outcome.markdown
    assert outcome.markdown.count("**winner**") == 2
    csv = pd.read_csv(tiny_conf / "outputs" / "fake" / "t" / "ci" / "comparison.csv")
    assert csv["chosen"].tolist().count(False) == 2  # one candidate of each method lost
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tiny_conf}/mlflow.db")
    assert len(client.search_runs([client.get_experiment_by_name(rep.name).experiment_id])) == 5  # 4 candidates + comparison


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_a_reproduction_run_again_with_skip_finished_reads_its_finished_arms_back(tiny_conf, monkeypatch):
    """tracking.skip_finished=true: the arms that FINISHED are read back from the record, not trained again, and
    the comparison is the same; by default every invocation trains its arms afresh."""
    from mlflow.tracking import MlflowClient

    rep = fake_rep(tiny_conf / "papers", monkeypatch)
    uri = f"tracking.uri=sqlite:///{tiny_conf}/mlflow.db"
    first = reproduce(rep, "ci", (uri, "engine.threads=1"), outputs=tiny_conf / "outputs")
    client = MlflowClient(uri.partition("=")[2])

    def arm_runs():
        found = client.search_runs([client.get_experiment_by_name(rep.name).experiment_id])
        return [r for r in found if not r.info.run_name.endswith("-comparison")]

    trained = len(arm_runs())
    again = reproduce(rep, "ci", (uri, "engine.threads=1", "tracking.skip_finished=true"), outputs=tiny_conf / "outputs")
    assert len(arm_runs()) == trained  # nothing trained again
    pd.testing.assert_frame_equal(again.table, first.table)
    reproduce(rep, "ci", (uri, "engine.threads=1"), outputs=tiny_conf / "outputs")
    assert len(arm_runs()) == 2 * trained


def test_cli_exit_code_0_when_every_claim_holds(monkeypatch):
    import fedbench.reproduce.run as run_module

    outcome = run_module.Outcome(pd.DataFrame(), [Claim("holds", True)], "| table |", [])
    monkeypatch.setattr(run_module, "reproduce", lambda rep, scale, extra, seeds=None, jobs=1: outcome)
    result = CliRunner().invoke(cli_app, ["reproduce", "losac/fig7", "--scale", "ci"])
    assert result.exit_code == 0 and "| table |" in result.output


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_cli_list_shows_every_reproduction_and_its_needs():
    result = CliRunner().invoke(cli_app, ["reproduce", "list"])
    assert result.exit_code == 0
    for name, rep in CATALOG.items():
        assert name in result.output and rep.claim in result.output
    assert "GPU" in result.output and "CPU" in result.output and "data: mnist" in result.output


def test_missing_data_is_reported_before_any_run(tiny_conf, monkeypatch):
    from fedbench.core.errors import DataUnavailableError

    rep = fake_rep(tiny_conf / "papers", monkeypatch)
    arms = tuple(Arm(a.method, a.group, (*a.overrides, "dataset=mnist", "data.root=nowhere")) for a in rep.scales["ci"].arms)
    rep = Reproduction(**{**rep.__dict__, "scales": {"ci": Scale(arms, (0,), "cpu", "s")}})
    with pytest.raises(DataUnavailableError):
        reproduce(rep, "ci", (f"tracking.uri=sqlite:///{tiny_conf}/mlflow.db",), outputs=tiny_conf / "outputs")
    assert not (tiny_conf / "outputs").exists()


# ------------------------------------------------------------------------- the ci scale of each paper
def _ratios(**ratios):
    return pd.DataFrame([dict(method=m, group="g", metric="dlg_error_ratio", mean=r) for m, r in ratios.items()])


def test_fig6_check_asserts_divergence_at_every_scale_and_its_weaker_form_at_ci():
    check = CATALOG["losac/fig6"].check
    proxy = _ratios(DSGD=0.77, MimeSVRG=0.78, FedAvg=0.81, SCAFFOLD=1.03, LoSAC=1.02)
    assert [c.holds for c in check(proxy, "full")] == [True, True, False, True, True]  # FedAvg's error falls
    # ci: each non-exact upload's divergence (the paper's claim), then its weaker form beside it
    assert [c.holds for c in check(proxy, "ci")] == [True, True, False, True, True, True, True, True]
    leaky = _ratios(DSGD=0.77, MimeSVRG=0.85, FedAvg=0.81, SCAFFOLD=1.03, LoSAC=1.02)  # FedAvg leaks more than Mime
    assert [c.holds for c in check(leaky, "ci")] == [True, True, False, False, True, True, True, True]
    assert not check(_ratios(DSGD=1.01, MimeSVRG=0.8, FedAvg=1.1, SCAFFOLD=1.1, LoSAC=1.1), "ci")[0].holds


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_reproduce_all_runs_what_can_run_here_and_says_why_not_for_the_rest(tiny_conf, monkeypatch):
    from fedbench.reproduce.run import reproduce_all

    rep = fake_rep(tiny_conf / "papers", monkeypatch)
    no_data = Reproduction(**{**rep.__dict__, "name": "fake/nodata", "scales": {"ci": Scale(
        tuple(Arm(a.method, a.group, (*a.overrides, "dataset=mnist", "data.root=nowhere")) for a in rep.scales["ci"].arms),
        (0,), "cpu", "s")}})
    gpu_only = Reproduction(**{**rep.__dict__, "name": "fake/gpu", "scales": {"full": rep.scales["full"]}})
    monkeypatch.setattr(catalog_module, "REPRODUCTIONS", {r.name: r for r in (rep, no_data, gpu_only)})
    results, summary = reproduce_all("ci", (f"tracking.uri=sqlite:///{tiny_conf}/mlflow.db", "engine.threads=1"),
                                     outputs=tiny_conf / "outputs", echo=lambda *_: None)
    assert set(results) == {"fake/t", "fake/nodata"}  # fake/gpu has no ci scale
    assert results["fake/t"].holds and "mnist not found" in results["fake/nodata"]
    text = summary.read_text()
    assert "| fake/t | 1 / 1 |" in text and "| fake/nodata | not run: mnist not found" in text
    assert "| method | group | metric | paper | measured |" in text  # the comparison table of what ran


@pytest.mark.parametrize("scale", ["nope", "/../../../victim", "../escape"])
def test_reproduce_all_refuses_a_scale_no_entry_has_before_writing(scale, tmp_path):
    """The scale names the summary's files (outputs/all-<scale>.md): one no entry has ran nothing, said nothing
    and wrote an empty summary, or one through `..` onto a file of the user's."""
    from fedbench.reproduce.run import reproduce_all

    victim = tmp_path / "victim.md"
    victim.write_text("the user's notes")
    with pytest.raises(ConfigError, match=r"Unknown --scale .*\. Available: ci, fmnist, full\."):
        reproduce_all(scale, (), outputs=tmp_path / "a" / "b" / "outputs", echo=lambda *_: None)
    assert victim.read_text() == "the user's notes" and sorted(p.name for p in tmp_path.rglob("*")) == ["victim.md"]


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_reproduce_all_records_claims_compute_and_docs(tiny_conf, monkeypatch):
    import fedbench.reproduce.results as results_module
    from fedbench.reproduce.run import reproduce_all

    rep = fake_rep(tiny_conf / "papers", monkeypatch)
    monkeypatch.setattr(catalog_module, "REPRODUCTIONS", {rep.name: rep})
    checkout = tiny_conf / "checkout"
    (checkout / "docs").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    monkeypatch.setattr(results_module, "CHECKOUT", checkout)
    monkeypatch.setattr(results_module, "RECORDS", checkout / "records")
    reproduce_all("ci", (f"tracking.uri=sqlite:///{tiny_conf}/mlflow.db", "engine.threads=1"),
                  outputs=tiny_conf / "outputs", echo=lambda *_: None, record=True)
    assert results_module.recorded_claims("fake/t", "ci") == [("B reaches 50% no later than A", True)]
    compute = results_module.measured_compute("fake/t", "ci")
    assert re.fullmatch(r"measured \d+ s on a \d+-core CPU \(\d{4}-\d\d-\d\d\)", compute), compute
    doc = (checkout / "docs" / "results.md").read_text()
    assert "| fake/t | 1 / 1 |" in doc and "--record engine.threads=1`" in doc and "- [x] B reaches 50% no later than A" in doc
    # the results page beside it (issue 33): one self-contained file with the verdicts, paper vs measured,
    # the figure and the runs' config hashes (tests/tracking/test_results_page.py opens such a page in a browser)
    page = (checkout / "docs" / "results.html").read_text()
    assert "holds</span>:\n      B reaches 50% no later than A" in page and "Paper vs measured" in page
    assert "config hash" in page and page.count("data:image/png;base64,") == 1 and "https://" not in page
    assert "B reaches 50% no later than A" in (tiny_conf / "outputs" / "all-ci.html").read_text()
    listing = CliRunner().invoke(cli_app, ["reproduce", "list"]).output
    assert compute in listing
    # recording needs a checkout to write into, and says so before any training
    monkeypatch.setattr(results_module, "CHECKOUT", tiny_conf / "nowhere")
    with pytest.raises(ConfigError, match="--record writes .* not one"):
        reproduce_all("ci", (), outputs=tiny_conf / "outputs", echo=lambda *_: None, record=True)


def test_a_ci_claim_that_fails_says_it_does_not_hold_at_this_scale():
    from fedbench.reproduce.run import claim_line

    failed = Claim("A beats B", False, "A 3, B 2")
    assert claim_line(failed, "ci") == "- [ ] A beats B (does not hold at this scale: A 3, B 2)"
    assert claim_line(failed, "full") == "- [ ] A beats B (A 3, B 2)"
    assert claim_line(Claim("A beats B", True, "A 2, B 3"), "ci") == "- [x] A beats B (A 2, B 3)"


def test_a_scaled_down_group_shows_the_paper_cell_it_stands_for(tmp_path, monkeypatch):
    rep = fake_rep(tmp_path, monkeypatch)
    runs = [RunResult(m, "g1 proxy", 0, 4, hist([0.1, 0.3, 0.5, 0.6])) for m in ("A", "B")]
    table = comparison(rep, aggregate(rep, runs), {"g1 proxy": "g1"}).set_index(["method", "group", "metric"])
    assert table.loc[("B", "g1 proxy", "rounds_to_0.5"), "paper"] == "20 (g1)"
    assert table.loc[("A", "g1 proxy", "acc"), "paper"] == "90.0 (g1)"
    assert table.loc[("B", "g1 proxy", "rounds_to_0.5"), "paper_speedup"] == "2.00×"  # the paper's own ratio
    unmapped = comparison(rep, aggregate(rep, runs)).set_index(["method", "group", "metric"])
    assert (unmapped["paper"] == "").all()


def test_a_paper_reference_that_never_reached_gives_a_lower_bound_from_its_budget(tmp_path, monkeypatch):
    rep = fake_rep(tmp_path, monkeypatch)  # the paper: A "100+" and B 50 rounds in g2
    runs = [RunResult(m, "g2", 0, 4, hist([0.1, 0.3, 0.5, 0.6])) for m in ("A", "B")]
    table = comparison(rep, aggregate(rep, runs)).set_index(["method", "group", "metric"])
    assert table.loc[("B", "g2", "rounds_to_0.5"), "paper_speedup"] == ">2.00×"


def test_every_paper_group_a_scale_names_is_a_column_of_the_paper():
    for rep in CATALOG.values():
        published = set(rep.paper_numbers()["group"])
        for scale in rep.scales.values():
            groups = {a.group for a in scale.arms}
            for mine, theirs in scale.paper_groups.items():
                assert mine in groups and theirs in published, (rep.name, mine, theirs)


@pytest.mark.slow
def test_jobs_2_trains_the_seeds_in_worker_processes_with_the_histories_and_claims_of_jobs_1(tiny_conf, monkeypatch):
    """`fedbench reproduce ENTRY --jobs 2` (issue 40 §8): each seed draws its own split, so the seeds are lane groups
    of their own, trained two at a time in worker processes; the histories, the table and the claims are those of
    --jobs 1, bit for bit (2 seeds: the verdict is within one seed of flipping, so seeds 2-4 are added, in workers too)."""
    import fedbench.runs.parallel as parallel
    import fedbench.reproduce.run as run_module

    rep = fake_rep(tiny_conf / "papers", monkeypatch, lambda table, scale: [Claim("every number", True, table.to_csv())])
    arms = tuple(Arm(a.method, a.group, (*a.overrides, "partition.seed=${seed}")) for a in rep.scales["ci"].arms[:2])
    rep = Reproduction(**{**rep.__dict__, "scales": {"ci": Scale(arms, (0, 1), "cpu", "s", config="fake/t/ci")}})
    trained, spawned = [], []
    run_grid, run_groups = run_module.run_grid, parallel.run_groups
    monkeypatch.setattr(run_module, "run_grid", lambda *a, **k: trained.append(run_grid(*a, **k)) or trained[-1])
    monkeypatch.setattr(parallel, "run_groups", lambda *a, **k: spawned.append(len(a[1])) or run_groups(*a, **k))
    outcomes = [reproduce(rep, "ci", (f"tracking.uri=sqlite:///{tiny_conf}/{jobs}.db", "engine.threads=1"),
                          outputs=tiny_conf / f"out{jobs}", jobs=jobs) for jobs in (1, 2)]
    assert spawned == [2, 3]  # --jobs 2 only: the seeds' groups went to worker processes (0-1, then 2-4)
    one = [r for runs, _ in trained[:2] for r in runs]
    two = [r for runs, _ in trained[2:] for r in runs]
    assert not any(failed for _, failed in trained) and len(one) == len(two) == 10  # 2 arms x 5 seeds
    for a, b in zip(one, two):
        assert (a.method, a.group, a.seed) == (b.method, b.group, b.seed)
        pd.testing.assert_frame_equal(a.history, b.history)
    pd.testing.assert_frame_equal(outcomes[0].table, outcomes[1].table)
    assert [(c.text, c.holds, c.detail) for c in outcomes[0].claims] == [(c.text, c.holds, c.detail) for c in outcomes[1].claims]
