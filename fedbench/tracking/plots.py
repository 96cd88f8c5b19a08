"""Curves of a run's metrics as PNG (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def plot_curves(frame: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [c for c in ("test_accuracy", "test_loss", "train_loss") if c in frame]
    if not columns:
        return None
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.4), squeeze=False)
    for ax, col in zip(axes[0], columns):
        data = frame[["round", col]].dropna()
        ax.plot(data["round"], data[col])
        ax.set_xlabel("round")
        ax.set_ylabel(col.replace("_", " "))
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def setting_title(cfg) -> str:
    """What a figure of one run shows: algorithm, data, split (with its skew), clients, seed."""
    partition = str(cfg.partition.name)
    skew = ", ".join(f"{k}={cfg.partition[k]}" for k in ("alpha", "c", "k", "shards_per_client") if k in cfg.partition)
    split = f"{partition} ({skew})" if skew else partition
    return (f"{cfg.algorithm.name} on {cfg.dataset.name}, {split}, "
            f"{cfg.clients_per_round}/{cfg.num_clients} clients per round, seed {cfg.seed}")


def comparison_stats(curves: pd.DataFrame, metric: str, x: str) -> pd.DataFrame:
    """Per label and x: the mean over seeds, the sample std (0 for one seed) and the number of seeds."""
    stats = curves.groupby(["label", x])[metric].agg(["mean", "std", "count"]).reset_index()
    return stats.sort_values(["label", x]).reset_index(drop=True)


def plot_comparison(curves: pd.DataFrame, metric: str, x: str, title: str, stem: Path) -> list[Path]:
    """Mean ± std bands over seeds, one line per `label`: `curves` has columns label, seed, x, metric.
    Writes stem.png and stem.pdf (vector, for a paper); returns both paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for label, stats in comparison_stats(curves, metric, x).groupby("label", sort=True):
        stats = stats.set_index(x)
        line, = ax.plot(stats.index, stats["mean"], label=f"{label} (n={int(stats['count'].max())})")
        spread = stats["std"].fillna(0.0)
        ax.fill_between(stats.index, stats["mean"] - spread, stats["mean"] + spread, color=line.get_color(), alpha=0.2,
                        linewidth=0)
    ax.set_xlabel({"round": "communication round", "floats_up": "floats uploaded (cumulative)"}.get(x, x))
    ax.set_ylabel(metric.replace("_", " "))
    import textwrap

    import matplotlib.ticker

    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=9)
    if x == "round":
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths
