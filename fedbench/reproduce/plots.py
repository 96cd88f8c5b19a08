"""The curves of a reproduction in its figure's layout: one column per group (panel), one row per metric,
with the paper's targets as dashed lines and schedule changes (a step size or rho switched at round R) as
dotted verticals, so a figure reads like the paper's."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedbench.reproduce.compare import RunResult

# axis names of the metrics the entries plot; anything else is its key with spaces
LABELS = {
    "test_accuracy": "test accuracy", "test_loss": "test loss", "train_loss": "training loss",
    "train_accuracy": "training accuracy", "grad_norm": "gradient norm", "objective_gap": "objective gap f(x) - f*",
    "dlg_error": "DLG reconstruction error", "floats_up": "floats uploaded",
}


def axis_label(metric: str) -> str:
    return LABELS.get(metric, metric.replace("_", " "))


@dataclass(frozen=True)
class Marks:
    """What a figure draws beside the curves: x axis name, per-metric targets (a dashed line in the panels
    where `only` matches the group), and per (method, group) schedule switches (round, text)."""

    x_label: str = "round"
    targets: tuple[tuple[str, float, tuple[str, ...]], ...] = ()  # (metric, value, group prefixes; () = all)
    switches: dict[tuple[str, str], tuple[tuple[int, str], ...]] = field(default_factory=dict)

    def targets_for(self, metric: str, group: str) -> list[float]:
        return [v for m, v, only in self.targets if m == metric and (not only or group.startswith(only))]


def shown_rounds(budgets: list[int]) -> int:
    """The x range of a panel: the budget most runs share. A reference run with a far longer budget (FedSGD
    to 300 rounds beside 30-round methods) is cut there, not allowed to squeeze every other curve."""
    common, _ = Counter(budgets).most_common(1)[0]
    return max(common, max((b for b in budgets if b <= 2 * common), default=common))


def plot_figure(runs: list[RunResult], rows: tuple[str, ...], path: Path, title: str = "",
                log_rows: tuple[str, ...] = (), marks: Marks = Marks()) -> Path | None:
    """The figure saved as `path`; None when nothing to draw."""

    fig = draw_figure(runs, rows, title, log_rows, marks)
    if fig is None:
        return None
    from fedbench.core.output_files import save_figure_files

    return save_figure_files(fig, [path], dpi=110, bbox_inches="tight")[0]


def draw_figure(runs: list[RunResult], rows: tuple[str, ...], title: str = "", log_rows: tuple[str, ...] = (),
                marks: Marks = Marks()):
    """Mean over seeds per method, shaded min-max band (a matplotlib Figure; None when nothing to draw)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(r.group for r in runs))
    methods = list(dict.fromkeys(r.method for r in runs))
    rows = tuple(m for m in rows if any(m in r.history for r in runs))
    if not runs or not rows:
        return None
    fig, axes = plt.subplots(len(rows), len(groups), figsize=(3.6 * len(groups) + 0.6, 2.9 * len(rows)),
                             squeeze=False, sharex="col", layout="constrained")
    colors = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    cut: dict[str, int] = {}  # method -> its budget, where the panel's x range cuts it
    for j, group in enumerate(groups):
        panel = [r for r in runs if r.group == group]
        xmax = shown_rounds([r.rounds for r in panel]) if marks.x_label == "round" else None
        cut.update({r.method: r.rounds for r in panel if xmax is not None and r.rounds > xmax})
        for i, metric in enumerate(rows):
            ax = axes[i][j]
            for method in methods:
                curves = [r.history[["round", metric]].dropna() for r in panel if r.method == method and metric in r.history]
                curves = [c for c in curves if not c.empty]
                if not curves:
                    continue
                n = min(len(c) for c in curves)
                x = curves[0]["round"].to_numpy()[:n]
                ys = np.stack([c[metric].to_numpy(dtype=float)[:n] for c in curves])
                keep = x <= xmax if xmax is not None else np.ones_like(x, dtype=bool)
                ax.plot(x[keep], ys.mean(0)[keep], color=colors[method], label=method, lw=1.4)
                if len(curves) > 1:
                    ax.fill_between(x[keep], ys.min(0)[keep], ys.max(0)[keep], color=colors[method], alpha=0.15, lw=0)
                for at, text in marks.switches.get((method, group), ()):
                    ax.axvline(at, color=colors[method], ls=":", lw=1.0)
                    if i == 0:
                        ax.annotate(text, (at, 1), xycoords=("data", "axes fraction"), fontsize=6, rotation=90,
                                    va="top", ha="right", color=colors[method])
            targets = marks.targets_for(metric, group)
            for target in targets:
                ax.axhline(target, color="0.35", ls="--", lw=0.9)
            if targets:  # one label per panel: labels beside close targets (0.8, 0.82) would overlap
                ax.text(0.99, 0.02, "dashed: target " + ", ".join(f"{t:g}" for t in targets), transform=ax.transAxes,
                        fontsize=6, ha="right", va="bottom", color="0.35",
                        bbox=dict(facecolor="white", edgecolor="none", alpha=0.7, pad=1))
            if metric in log_rows:
                ax.set_yscale("log")
            if xmax is not None:
                ax.set_xlim(0, xmax)
            ax.grid(alpha=0.3)
            if i == 0 and group:
                ax.set_title(group, fontsize=9)
            if j == 0:
                ax.set_ylabel(axis_label(metric))
            if i == len(rows) - 1:
                ax.set_xlabel(marks.x_label)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h), labels.append(lab)
    labels = [f"{lab} (runs to round {cut[lab]}, cut)" if lab in cut else lab for lab in labels]
    # below the panels, outside them (the constrained layout makes room): never over a curve, never cut off
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
