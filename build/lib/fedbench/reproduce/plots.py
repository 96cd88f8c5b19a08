"""The curves of a reproduction in its figure's layout: one column per group (panel), one row per metric."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedbench.reproduce.compare import RunResult


def plot_figure(runs: list[RunResult], rows: tuple[str, ...], path: Path, title: str = "",
                log_rows: tuple[str, ...] = ()) -> Path | None:
    """Mean over seeds per method, shaded min-max band; None when nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(r.group for r in runs))
    methods = list(dict.fromkeys(r.method for r in runs))
    rows = tuple(m for m in rows if any(m in r.history for r in runs))
    if not runs or not rows:
        return None
    fig, axes = plt.subplots(len(rows), len(groups), figsize=(3.6 * len(groups) + 0.6, 2.9 * len(rows)),
                             squeeze=False, sharex="col")
    colors = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    for j, group in enumerate(groups):
        for i, metric in enumerate(rows):
            ax = axes[i][j]
            for method in methods:
                curves = [r.history[["round", metric]].dropna() for r in runs
                          if r.method == method and r.group == group and metric in r.history]
                curves = [c for c in curves if not c.empty]
                if not curves:
                    continue
                n = min(len(c) for c in curves)
                x = curves[0]["round"].to_numpy()[:n]
                ys = np.stack([c[metric].to_numpy(dtype=float)[:n] for c in curves])
                ax.plot(x, ys.mean(0), color=colors[method], label=method, lw=1.4)
                if len(curves) > 1:
                    ax.fill_between(x, ys.min(0), ys.max(0), color=colors[method], alpha=0.15, lw=0)
            if metric in log_rows:
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
            if i == 0 and group:
                ax.set_title(group, fontsize=9)
            if j == 0:
                ax.set_ylabel(metric.replace("_", " "))
            if i == len(rows) - 1:
                ax.set_xlabel("round")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h), labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 if len(labels) <= 6 else 0.1, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
