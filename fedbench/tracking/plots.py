"""Curves of a run's metrics as PNG (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

X_AXES = ("round", "floats_up", "floats_down", "wall_time")


def plot_curves(frame: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """A run's curves (test accuracy, test loss, train loss against the round) as a PNG. A grid draws
    one per run: the figure of each set of columns is built once per process and only its lines,
    limits and title change, which halves the cost of a figure (axes, ticks and layout are most of it)."""
    columns = tuple(c for c in ("test_accuracy", "test_loss", "train_loss") if c in frame)
    if not columns:
        return None
    fig = _curves_figure(columns)
    for ax, col in zip(fig.axes, columns):
        data = frame[["round", col]].dropna()
        ax.lines[0].set_data(data["round"].to_numpy(), data[col].to_numpy())
        ax.relim()
        ax.autoscale_view()
    fig.suptitle(title)  # the figure's title text, reused
    fig.savefig(path, dpi=110)
    return path


_CURVES: dict[tuple[str, ...], object] = {}


def _curves_figure(columns: tuple[str, ...]):
    """The figure for `columns`, one axes each; its layout is fixed in inches (tick labels of at most
    five characters, the axis labels and the title fit), so that no layout engine runs at every save."""
    if columns not in _CURVES:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        width, height, left, gap = 4.2 * len(columns), 3.4, 0.8, 0.85
        fig = Figure(figsize=(width, height))
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, len(columns), squeeze=False)[0]
        panel = (width - left - 0.15 - gap * (len(columns) - 1)) / len(columns)
        fig.subplots_adjust(left=left / width, right=1 - 0.15 / width, bottom=0.55 / height, top=1 - 0.5 / height,
                            wspace=gap / panel)
        for ax, col in zip(axes, columns):
            ax.plot([], [])
            ax.set_xlabel("round")
            ax.set_ylabel(col.replace("_", " "))
            ax.grid(alpha=0.3)
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))  # short tick labels: an offset
        fig.suptitle(" ")                                                   # ("1e-4") above the axes
        _CURVES[columns] = fig
    return _CURVES[columns]


# How papers write the names of data sets, splits and models in a figure's caption; others as recorded.
SHOWN_NAMES = {
    "fmnist": "FMNIST", "mnist": "MNIST", "emnist": "EMNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
    "tinyimagenet": "Tiny ImageNet", "digits": "Digits", "synthetic": "Synthetic", "shakespeare": "Shakespeare",
    "sent140": "Sent140", "har": "HAR", "esr": "ESR", "libsvm": "LIBSVM", "sparse_logreg": "sparse logistic regression",
    "lstsq": "least squares",
    "dirichlet": "Dirichlet", "dirichlet_balanced": "balanced Dirichlet", "iid": "IID", "iid_stratified": "stratified IID",
    "shards": "shards", "label_k": "label-k", "c_noniid": "c-non-IID", "label_sorted": "label-sorted",
    "natural": "natural split", "quantity_skew": "quantity skew", "imbalanced_shards": "imbalanced shards",
    "pfl_noniid": "PFL non-IID", "composite_mnist": "composite MNIST",
    "mclr": "MCLR", "mlp_2nn": "MLP (2NN)", "cnn": "CNN", "resnet18_gn": "ResNet-18-GN", "logreg": "logistic regression",
    "linear": "linear", "matrix": "matrix",
}
SKEW_KEYS = ("alpha", "c", "k", "shards_per_client", "sigma")  # the number a split's name is written with


def caption(values) -> str:
    """A figure's caption from a run's keys (a config, or a {dotted key: value} mapping of what several runs
    share), e.g. `FMNIST, Dirichlet(0.3), MCLR, 10 of 20 clients`; a key absent is left out."""
    from omegaconf import DictConfig, OmegaConf

    def get(key: str):
        value = OmegaConf.select(values, key, default=None) if isinstance(values, DictConfig) else values.get(key)
        return None if value is None or str(value) in ("", "None", "nan") else value

    parts = []
    if (dataset := get("dataset.name")) is not None:
        parts.append(SHOWN_NAMES.get(str(dataset), str(dataset)))
    if (partition := get("partition.name")) is not None:
        name = SHOWN_NAMES.get(str(partition), str(partition))
        skew = [str(get(f"partition.{k}")) for k in SKEW_KEYS if get(f"partition.{k}") is not None]
        parts.append(f"{name}({', '.join(skew)})" if skew else name)
    if (model := get("model.name")) is not None:
        parts.append(SHOWN_NAMES.get(str(model), str(model)))
    cohort, population = get("clients_per_round"), get("num_clients")
    if cohort is not None and population is not None:
        parts.append(f"{cohort} of {population} clients")
    elif population is not None:
        parts.append(f"{population} clients")
    return ", ".join(parts)


def setting_title(cfg) -> str:
    """What a figure of one run shows, as a caption: algorithm, data, split (with its skew), model,
    clients, seed, e.g. `fedavg: Digits, Dirichlet(0.1), MCLR, 10 of 20 clients, seed 3`."""
    return f"{cfg.algorithm.name}: {caption(cfg)}, seed {cfg.seed}"


def comparison_stats(curves: pd.DataFrame, metric: str, x: str) -> pd.DataFrame:
    """Per label and x: the mean over seeds, the sample std (0 for one seed) and the number of seeds."""
    stats = curves.groupby(["label", x])[metric].agg(["mean", "std", "count"]).reset_index()
    return stats.sort_values(["label", x]).reset_index(drop=True)


def comparison_figure(curves: pd.DataFrame, metric: str, x: str, title: str):
    """Mean ± std bands over seeds, one line per `label` (`curves`: columns label, seed, x, metric), as a
    matplotlib Figure. The legend sits below the axes, outside them, in the figure's constrained layout:
    long labels (a method and its setting) are wrapped, never drawn over the curves or cut off."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for label, stats in comparison_stats(curves, metric, x).groupby("label", sort=True):
        stats = stats.set_index(x)
        text = "\n".join(textwrap.wrap(f"{label} (n={int(stats['count'].max())})", 60))
        line, = ax.plot(stats.index, stats["mean"], label=text)
        spread = stats["std"].fillna(0.0)
        ax.fill_between(stats.index, stats["mean"] - spread, stats["mean"] + spread, color=line.get_color(), alpha=0.2,
                        linewidth=0)
    ax.set_xlabel({"round": "communication round", "floats_up": "floats uploaded (cumulative)"}.get(x, x))
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=9)
    if x == "round":
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    labels = ax.get_legend_handles_labels()[1]
    fig.legend(loc="outside lower center", ncols=2 if len(labels) > 3 and max(map(len, labels)) <= 40 else 1,
               fontsize=8, frameon=False)
    return fig


def save_figure(fig, stem: Path, suffixes: tuple[str, ...] = (".png", ".pdf")) -> list[Path]:
    """Write `fig` as stem.png and stem.pdf (vector, for a paper), creating stem's folder; closes it.
    bbox_inches="tight" keeps every artist (the legend below the axes) inside the file."""
    from fedbench.core.output_files import save_figure_files

    return save_figure_files(fig, [stem.with_suffix(s) for s in suffixes], "--output", dpi=150, bbox_inches="tight")


def figure_png(fig, dpi: int = 110) -> bytes:
    """`fig` as PNG bytes (for a page that embeds it), its texts as written (core.output_files.as_written); closes it."""
    import io

    import matplotlib.pyplot as plt

    from fedbench.core.output_files import as_written

    as_written(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def plot_comparison(curves: pd.DataFrame, metric: str, x: str, title: str, stem: Path) -> list[Path]:
    """comparison_figure written as stem.png and stem.pdf; returns both paths."""
    return save_figure(comparison_figure(curves, metric, x, title), stem)
