"""Figures people put in papers: `fedbench plot` (mean ± std over seeds, PNG and PDF), per-run and
partition figures that name their setting (issue 22)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import make_cfg
from tests.faultkit import SMALL, fedbench


def test_comparison_stats_are_the_mean_and_sample_std_over_seeds():
    from fedbench.tracking.plots import comparison_stats

    rng = np.random.default_rng(0)
    values = rng.random((3, 4))  # 3 seeds x 4 rounds
    curves = pd.DataFrame([{"label": "a", "seed": s, "round": r + 1, "m": values[s, r]} for s in range(3) for r in range(4)]
                          + [{"label": "b", "seed": 0, "round": r + 1, "m": 1.0} for r in range(4)])
    stats = comparison_stats(curves, "m", "round")
    a = stats[stats["label"] == "a"]
    assert np.allclose(a["mean"], values.mean(0)) and np.allclose(a["std"], values.std(0, ddof=1))
    assert (a["count"] == 3).all() and stats[stats["label"] == "b"]["std"].isna().all()


@pytest.mark.slow
def test_plot_writes_png_and_pdf_of_every_algorithm(tmp_path):
    from fedbench.runs.single import run_job

    uri = f"sqlite:///{tmp_path}/m.db"
    for algorithm in ("fedavg", "fedprox"):
        for seed in (0, 1):
            run_job(make_cfg(f"tracking.uri={uri}", *SMALL, "rounds=3", f"algorithm={algorithm}", f"seed={seed}",
                             "tracking.artifacts=false"), tmp_path / f"{algorithm}{seed}", quiet=True)
    for x in ("round", "floats_up"):
        out = fedbench("plot", "--uri", uri, "--x", x, "--output", str(tmp_path / f"fig_{x}"), cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert (tmp_path / f"fig_{x}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / f"fig_{x}.pdf").read_bytes()[:5] == b"%PDF-"
        assert "(4 runs)" in out.stderr


def test_figures_of_one_run_and_of_a_split_name_their_setting(tmp_path):
    from fedbench.tracking.plots import setting_title

    title = setting_title(make_cfg("partition.alpha=0.1", "seed=3"))
    assert title == "fedavg: Digits, Dirichlet(0.1), MCLR, 10 of 20 clients, seed 3"  # a caption (issue 41)
    for style in ("heatmap", "bars"):
        out = fedbench("data", "show", "--style", style, "--out", str(tmp_path / f"{style}.png"), "partition.alpha=0.2",
                       cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert (tmp_path / f"{style}.png").read_bytes()[:4] == b"\x89PNG"


def test_class_names_label_the_partition_figures_of_named_data_sets():
    from fedbench.cli.data import CLASS_NAMES

    assert len(CLASS_NAMES["fmnist"]) == len(CLASS_NAMES["cifar10"]) == 10 and len(CLASS_NAMES["har"]) == 6


def test_metrics_csv_has_the_round_first(tmp_path):
    """A run's metrics.csv opens with its key, `round` (issue 41): the engine adds it to a round's metrics last."""
    from fedbench.tracking.recorder import Drawing

    rows = [{"floats_down": 10.0 * r, "floats_up": 10.0 * r, "wall_time": 0.1 * r, "test_accuracy": 0.1 * r,
             "eval_time": 0.01 * r, "round": r} for r in (1, 2)]  # as engine.loop._round_metrics orders them
    drawn = Drawing(rows, "t")
    drawn.result()
    header, first, _ = (drawn.folder / "metrics.csv").read_text().splitlines()
    drawn.close()
    assert header.split(",") == ["round", "floats_down", "floats_up", "wall_time", "test_accuracy", "eval_time"]
    assert first.split(",")[0] == "1"


@pytest.mark.parametrize("label", [r"fed$\frac{$ partition.alpha=0.3", "a$b$c$", r"$\undefinedmacro$"])
def test_a_label_from_a_shared_store_is_drawn_as_written(tmp_path, label):
    """matplotlib read `$...$` in a run's param as TeX: `plot` and `report --format html` ended in mathtext's
    ValueError traceback (core.output_files.as_written)."""
    from fedbench.tracking.plots import comparison_figure, figure_png, plot_comparison

    curves = pd.DataFrame({"label": [label, label, "fedavg", "fedavg"], "seed": ["0"] * 4, "round": [1, 2, 1, 2],
                           "test_accuracy": [0.5, 0.6, 0.5, 0.7]})
    paths = plot_comparison(curves, "test_accuracy", "round", label, tmp_path / "curves")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 0 for p in paths)
    assert figure_png(comparison_figure(curves, "test_accuracy", "round", label)).startswith(b"\x89PNG")
