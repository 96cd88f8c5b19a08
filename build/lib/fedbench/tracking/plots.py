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
