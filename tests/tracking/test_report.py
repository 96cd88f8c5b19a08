"""`fedbench report` and `fedbench plot` on a grid over algorithms and seeds (issue 33): the setting is
what varies across the compared runs (never an algorithm's own keys, never a data set's constants), so
the speed-up column fills; numbers for CSV, booktabs for LaTeX; bad options are one line before any work;
figures keep their legend inside the file with no layout warning."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
from typer.testing import CliRunner

from fedbench.core.errors import ConfigError

ROUNDS = 6


def history(speed: float, seed: int) -> list[tuple[int, float]]:
    return [(r, min(0.95, speed * r + seed / 100)) for r in range(1, ROUNDS + 1)]


def grid_rows() -> list[dict]:
    """fedavg and scaffold at seeds 0-2, as MLflow records them: scaffold alone has algorithm.option, and a
    data set constant (dataset.mean) is recorded by some runs only."""
    rows = []
    for alg, speed in (("fedavg", 0.15), ("scaffold", 0.2)):
        for seed in range(3):
            params = {"algorithm.name": alg, "seed": str(seed), "rounds": str(ROUNDS), "dataset.name": "digits",
                      "eta_l": "0.1", "tracking.uri": f"u{seed}"}
            if alg == "scaffold":
                params["algorithm.option"] = "II"
                params["dataset.mean"] = "0.5"
            rows.append({"params": params, "history": history(speed, seed)})
    return rows


def as_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame([{**{f"param:{k}": v for k, v in r["params"].items()}, "history": r["history"]} for r in rows])
    frame["final_accuracy"] = frame["history"].map(lambda h: h[-1][1])
    frame["best_accuracy"] = frame["history"].map(lambda h: max(a for _, a in h))
    frame["final_loss"] = 1.0
    return frame


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """An MLflow store holding grid_rows as FINISHED runs (written directly: no training)."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{tmp}/m.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("fedbench")
    for i, row in enumerate(grid_rows()):
        run = client.create_run(exp, tags={"config_hash": f"hash{i}", "git_commit": "abc"})
        rid = run.info.run_id
        metrics = [Metric(k, v, 0, r) for r, a in row["history"] for k, v in (("test_accuracy", a), ("floats_up", 100.0 * r))]
        client.log_batch(rid, metrics=metrics, params=[Param(k, v) for k, v in row["params"].items()])
        client.set_terminated(rid)
    return uri, tmp


def cli(*args: str):
    from fedbench.cli.app import app

    return CliRunner().invoke(app, list(args))


def test_the_grid_over_algorithms_fills_the_speed_up_column():
    from fedbench.tracking.report import build_table

    table = build_table(as_frame(grid_rows()), None, 0.8, "fedavg", None).set_index("algorithm")
    assert "setting" not in table  # algorithm.option and dataset.mean are not settings: no empty column (issue 41)
    assert list(table["hyperparameters"]) == ["", "option=II"]  # what each method ran with (issue 41)
    rounds = {alg: [next(r for r, a in history(speed, s) if a >= 0.8) for s in range(3)]
              for alg, speed in (("fedavg", 0.15), ("scaffold", 0.2))}
    mean = {alg: sum(v) / 3 for alg, v in rounds.items()}
    assert table.loc["scaffold", "speed-up vs fedavg"] == f"{mean['fedavg'] / mean['scaffold']:.2f}x"
    assert table.loc["fedavg", "speed-up vs fedavg"] == "1.00x"


def test_a_methods_own_keys_that_vary_label_its_variants_and_settings_are_shared():
    from fedbench.tracking.report import build_table

    rows = grid_rows()
    for row in rows:
        row["params"]["partition.alpha"] = "0.1" if row["params"]["seed"] == "0" else "1.0"
        if row["params"]["algorithm.name"] == "scaffold" and row["params"]["seed"] != "0":
            row["params"]["algorithm.option"] = "I"
    table = build_table(as_frame(rows), None, None, None, None)
    assert sorted(zip(table["algorithm"], table["setting"])) == [
        ("fedavg", "partition.alpha=0.1"), ("fedavg", "partition.alpha=1.0"),
        ("scaffold (option=I)", "partition.alpha=1.0"), ("scaffold (option=II)", "partition.alpha=0.1")]


def test_an_unreached_target_shows_each_runs_own_rounds():
    from fedbench.tracking.report import build_table

    rows = grid_rows()[:2]
    rows[1]["params"]["rounds"] = "40"
    rows[1]["history"] = [(r, 0.1) for r in range(1, 41)]
    rows[0]["history"] = [(r, 0.1) for r in range(1, ROUNDS + 1)]
    table = build_table(as_frame(rows), ["seed"], 0.8, None, None)
    assert set(table["rounds_to_0.8"]) == {f">{ROUNDS} (0/1)", ">40 (0/1)"}


def test_a_setting_that_leaves_out_a_varying_key_is_refused_not_pooled():
    from fedbench.tracking.report import build_table

    rows = grid_rows()
    for row in rows:
        row["params"]["eta_l"] = "0.1" if row["params"]["seed"] == "0" else "0.3"
    with pytest.raises(ConfigError, match=r"would pool runs that differ in eta_l .* add --setting eta_l"):
        build_table(as_frame(rows), ["dataset.name"], None, None, None)


def test_csv_is_numbers_and_latex_is_booktabs(store):
    uri, tmp = store
    out = cli("report", "--uri", uri, "--target", "0.8", "--baseline", "fedavg", "--format", "csv")
    assert out.exit_code == 0, out.output
    import io

    table = pd.read_csv(io.StringIO(out.stdout)).set_index("algorithm")
    for col in ("final_accuracy_mean", "final_accuracy_std", "rounds_to_0.8_mean", "rounds_to_0.8_std",
                "speedup_vs_fedavg"):
        assert pd.api.types.is_float_dtype(table[col]), col
    assert list(table["n"]) == [3, 3] and list(table["rounds_to_0.8_reached"]) == [3, 3]
    finals = [history(0.2, s)[-1][1] for s in range(3)]
    assert table.loc["scaffold", "final_accuracy_mean"] == pytest.approx(sum(finals) / 3)
    assert table.loc["scaffold", "final_accuracy_std"] == pytest.approx(pd.Series(finals).std(ddof=1))
    latex = cli("report", "--uri", uri, "--target", "0.8", "--format", "latex", "--output", str(tmp / "new" / "t.tex"))
    assert latex.exit_code == 0, latex.output
    text = (tmp / "new" / "t.tex").read_text()
    assert "\\toprule" in text and "\\midrule" in text and "\\bottomrule" in text
    assert "final\\_accuracy" in text and "$\\pm$" in text


@pytest.mark.parametrize("args, message", [
    (["report", "--setting", "nope"], "Unknown --setting 'nope': no run records it"),
    (["report", "--baseline", "fedavg"], "--baseline fedavg is the speed-up in rounds to a target: give --target too"),
    (["report", "--target", "0.8", "--baseline", "fedav"], "Available: fedavg, scaffold. Did you mean 'fedavg'?"),
    (["plot", "--setting", "nope"], "Unknown --setting 'nope': no run records it"),
])
def test_bad_options_are_one_line(store, args, message):
    uri, tmp = store
    out = cli(*args, "--uri", uri)
    assert isinstance(out.exception, ConfigError) and message in str(out.exception), out.output


def test_plot_creates_its_folder_keeps_the_legend_in_the_figure_and_warns_nothing(store):
    uri, tmp = store
    stem = tmp / "figs" / "deeper" / "acc"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # matplotlib's "Tight layout not applied" among them
        out = cli("plot", "--uri", uri, "--x", "floats_up", "--output", str(stem))
    assert out.exit_code == 0, out.output
    assert stem.with_suffix(".png").read_bytes()[:4] == b"\x89PNG" and stem.with_suffix(".pdf").is_file()


def test_the_legend_sits_outside_the_axes_and_inside_the_figure():
    from fedbench.tracking.plots import comparison_figure

    long = "scaffold (option=II) partition.alpha=0.1 eta_l=0.03 local_steps=10 model.name=mlp_2nn"
    curves = pd.DataFrame([{"label": lab, "seed": s, "round": r, "m": r / 10 + s / 100}
                           for lab in ("fedavg", long, "fedprox (mu=0.01)", "fedprox (mu=0.1)") for s in (0, 1)
                           for r in range(1, 8)])
    fig = comparison_figure(curves, "m", "round", "title")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [legend] = fig.legends
    box, axes, whole = legend.get_window_extent(renderer), fig.axes[0].get_window_extent(renderer), fig.bbox
    assert box.y1 <= axes.y0 and not box.overlaps(axes)
    assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0


def test_the_reproduction_figure_labels_close_targets_without_overlap():
    from fedbench.reproduce.compare import RunResult
    from fedbench.reproduce.plots import Marks, draw_figure

    runs = [RunResult(m, "g", s, 5, pd.DataFrame({"round": range(1, 6), "test_accuracy": [0.5, 0.7, 0.8, 0.82, 0.85]}))
            for m in ("fedavg", "scaffold") for s in (0, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fig = draw_figure(runs, ("test_accuracy",), "t", marks=Marks(targets=(("test_accuracy", 0.8, ()),
                                                                           ("test_accuracy", 0.81, ()))))
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in ax.texts if t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert any("0.8" in t.get_text() and "0.81" in t.get_text() for t in texts)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    [legend] = fig.legends
    assert not any(legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)


def test_a_pipe_or_line_break_in_a_setting_stays_in_its_cell():
    import re

    from fedbench.tracking.report import build_table, to_markdown

    rows = grid_rows()
    for row in rows:
        row["params"]["partition.alpha"] = "0.1|x" if row["params"]["seed"] == "0" else "a\\|b\nc"
    lines = to_markdown(build_table(as_frame(rows), None, None, None, None)).splitlines()
    cells = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in lines]  # split at unescaped pipes only
    assert len(lines) == 2 + 4 and {len(c) for c in cells} == {len(cells[0])}
    settings = {c[cells[0].index(" setting ")].strip() for c in cells[2:]}
    assert settings == {"partition.alpha=0.1\\|x", "partition.alpha=a\\\\\\|b c"}


def test_several_targets_give_a_column_each_with_its_speed_up(store):
    """--target 0.75 --target 0.8 used to keep 0.8 alone (issue 41): a rounds-to-target and a speed-up column
    per target, in the table and in the CSV's numbers."""
    uri, _ = store
    out = cli("report", "--uri", uri, "--target", "0.75", "--target", "0.8", "--baseline", "fedavg", "--format", "csv")
    assert out.exit_code == 0, out.output
    import io

    table = pd.read_csv(io.StringIO(out.stdout)).set_index("algorithm")
    for t in (0.75, 0.8):
        rounds = {alg: [next(r for r, a in history(speed, s) if a >= t) for s in range(3)]
                  for alg, speed in (("fedavg", 0.15), ("scaffold", 0.2))}
        assert table.loc["scaffold", f"rounds_to_{t:g}_mean"] == pytest.approx(sum(rounds["scaffold"]) / 3)
        assert table.loc["scaffold", f"speedup_vs_fedavg_to_{t:g}"] == pytest.approx(
            sum(rounds["fedavg"]) / sum(rounds["scaffold"]))
    text = cli("report", "--uri", uri, "--target", "0.75", "--target", "0.8", "--baseline", "fedavg")
    header = text.stdout.splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")][-4:] == [
        "rounds_to_0.75", "speed-up vs fedavg to 0.75", "rounds_to_0.8", "speed-up vs fedavg to 0.8"]
    bad = cli("report", "--uri", uri, "--target", "0.75", "--target", "0.8", "--best-by", "rounds_to_0.9")
    assert isinstance(bad.exception, ConfigError) and "rounds_to_0.75, rounds_to_0.8" in str(bad.exception)


def test_the_methods_own_hyperparameters_are_in_the_table_the_page_and_the_plot(store, tmp_path):
    """What each method ran with (SCAFFOLD's option) is printed even where it does not vary, and a setting
    column with nothing in it is not printed (issue 41); the figure's title reads like a caption."""
    from fedbench.tracking.report import comparison_plot

    uri, _ = store
    out = cli("report", "--uri", uri)
    header, _, *rows = out.stdout.splitlines()
    assert "setting" not in header and "hyperparameters" in header
    assert any(row.startswith("| scaffold | option=II |") for row in rows), rows
    page = tmp_path / "page.html"
    assert cli("report", "--uri", uri, "--format", "html", "--output", str(page)).exit_code == 0
    html = page.read_text()
    assert "option=II" in html and ">setting<" not in html and ">hyperparameters<" in html
    fig, _ = comparison_plot(uri=uri)
    [legend] = fig.legends
    assert sorted(t.get_text() for t in legend.get_texts()) == ["fedavg (n=3)", "scaffold option=II (n=3)"]
    assert fig.axes[0].get_title() == "Digits"


def test_a_figures_title_reads_like_a_caption():
    from fedbench.tracking.report import shared_heading

    frame = as_frame(grid_rows())
    for key, value in (("dataset.name", "fmnist"), ("partition.name", "dirichlet"), ("partition.alpha", "0.3"),
                       ("model.name", "mclr"), ("num_clients", "20"), ("clients_per_round", "10")):
        frame[f"param:{key}"] = value
    assert shared_heading(frame) == "FMNIST, Dirichlet(0.3), MCLR, 10 of 20 clients"
    frame.loc[0, "param:partition.alpha"] = "0.1"  # what differs is not in the title
    assert shared_heading(frame) == "FMNIST, Dirichlet, MCLR, 10 of 20 clients"


def test_a_run_that_fedbench_did_not_record_is_left_out_with_a_note(tmp_path):
    """A shared store holds other tools' runs: they have none of fedbench's params. `report` leaves them out and
    says how many; a store with only such runs is one line, not a KeyError traceback."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("fedbench")
    run = client.create_run(exp)
    client.log_batch(run.info.run_id, metrics=[Metric("test_accuracy", 0.5, 0, 1)], params=[Param("lr", "0.1")])
    client.set_terminated(run.info.run_id)
    out = cli("report", "--uri", uri)
    assert isinstance(out.exception, ConfigError), out.output
    assert "no FINISHED fedbench runs in experiment 'fedbench' (1 FINISHED run(s) without the param algorithm.name" \
        in str(out.exception)
    for i, row in enumerate(grid_rows()[:2]):
        rid = client.create_run(exp, tags={"config_hash": f"h{i}"}).info.run_id
        client.log_batch(rid, metrics=[Metric("test_accuracy", a, 0, r) for r, a in row["history"]],
                         params=[Param(k, v) for k, v in row["params"].items()])
        client.set_terminated(rid)
    out = cli("report", "--uri", uri)
    assert out.exit_code == 0, out.output
    assert "fedavg" in out.output and "1 FINISHED run(s) without the param algorithm.name" in out.output


def test_a_page_made_again_from_the_same_tables_is_the_same_file():
    """pandas gives each Styler a random id: every rebuild of docs/results.html changed every table's
    id lines. The ids now follow each table's place and content, unique on the page."""
    import re

    from fedbench.tracking.page import Section, render_section

    table = pd.DataFrame({"method": ["fedavg", "<b>x</b>"], "rounds": [3, 5]})
    section = Section("Entry", tables=[("rounds", table), ("rounds", table), ("other", table.iloc[:1])])
    first, again = render_section(section), render_section(section)
    assert first == again
    ids = re.findall(r'id="([^"]+)"', first)
    assert len(ids) == 3 and len(set(ids)) == 3, ids  # the tables' own ids, no per-cell ids
    assert "&lt;b&gt;x&lt;/b&gt;" in first and "<b>x</b>" not in first


@pytest.mark.parametrize("history", [
    [(1, 0.2), (2**62, 0.9)],  # rounds to 0.5 came out as 2**62 (and as negative for -2**62)
    [(-(2**62), 0.9), (1, 0.2)],
    [(1, 0.2), (1, 0.9)],
    [(1, 0.2), (2, 1e308)],  # printed as a 309-digit cell
    [(1, 0.2), (2, float("inf"))]], ids=["huge-round", "negative-round", "a-round-twice", "1e308", "inf"])
def test_a_history_no_fedbench_run_records_is_left_out_and_named(store, tmp_path, history):  # noqa: F811
    """A shared store may hold runs with fedbench's params whose test_accuracy no fedbench run records: left
    out of the table with a note naming each, and the table is the other runs' alone."""
    import shutil

    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    _, folder = store
    shutil.copy(folder / "m.db", tmp_path / "m.db")
    uri = f"sqlite:///{tmp_path}/m.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("fedbench").experiment_id
    run = client.create_run(exp, tags={"config_hash": "crafted"})
    params = {"algorithm.name": "fedprox", "seed": "0", "rounds": str(ROUNDS), "dataset.name": "digits", "eta_l": "0.1"}
    client.log_batch(run.info.run_id, metrics=[Metric("test_accuracy", v, 0, r) for r, v in history],
                     params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(run.info.run_id)
    out = cli("report", "--uri", uri, "--target", "0.5")
    assert out.exit_code == 0, out.output
    assert "fedprox" not in out.stdout and "fedavg" in out.stdout and "scaffold" in out.stdout, out.stdout
    assert (f"note: 1 FINISHED run(s) whose test_accuracy no fedbench run records (a round outside 1..rounds, twice, "
            f"or a value outside [0, 1]), left out: {run.info.run_id}") in out.stderr, out.stderr


CRAFTED_ROWS = {  # SQLite keeps any type in any column: each was a traceback of report or plot
    "text value": "update metrics set value = 'abc' where key = 'test_accuracy' and step = 2",
    "bytes value": "update metrics set value = x'00ff' where key = 'test_accuracy' and step = 2",
    "text step": "update metrics set step = 'x' where key = 'test_accuracy' and step = 2",
    "text final": "update latest_metrics set value = 'abc' where key = 'test_accuracy'",
    "text loss": "update metrics set value = 'abc' where key = 'test_loss' and step = 2"}


@pytest.mark.parametrize("crafted", CRAFTED_ROWS)
def test_a_metric_row_that_is_not_a_number_is_left_out_not_a_traceback(store, tmp_path, crafted):  # noqa: F811
    import shutil
    import sqlite3

    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    _, folder = store
    shutil.copy(folder / "m.db", tmp_path / "m.db")
    uri = f"sqlite:///{tmp_path}/m.db"
    client = MlflowClient(uri)
    run = client.create_run(client.get_experiment_by_name("fedbench").experiment_id, tags={"config_hash": "crafted"})
    params = {"algorithm.name": "fedprox", "seed": "0", "rounds": str(ROUNDS), "dataset.name": "digits", "eta_l": "0.1"}
    client.log_batch(run.info.run_id, metrics=[Metric(k, 0.1 * r, 0, r) for r in (1, 2) for k in ("test_accuracy",
                                                                                              "test_loss")],
                     params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(run.info.run_id)
    with sqlite3.connect(tmp_path / "m.db") as db:
        db.execute(CRAFTED_ROWS[crafted] + f" and run_uuid = '{run.info.run_id}'")
    out = cli("report", "--uri", uri)
    assert out.exit_code == 0 and out.exception is None, out.output
    assert "fedavg" in out.stdout, out.stdout
    if crafted != "text loss":
        assert "fedprox" not in out.stdout and run.info.run_id in out.stderr, out.output
    metric = ["--metric", "test_loss"] if crafted == "text loss" else []
    plot = cli("plot", "--uri", uri, *metric, "--output", str(tmp_path / "f.png"))
    assert plot.exit_code == 0 and plot.exception is None, plot.output
