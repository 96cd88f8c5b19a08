"""`fedbench data show`: per-client sizes and label counts of a partition, and a heat map."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Inspect data sets and their partitions.", no_args_is_help=True, add_completion=False)


POPULATION_SHOWN = 1000  # users of a population made on demand whose labels are counted (each one is made)


def client_label_counts(overrides: list[str]):
    """(config, dataset, parts, counts [N, C]) for the data set and partition the overrides select; for a
    population made on demand (dataset.generator=per_user), parts is None and counts covers its first
    POPULATION_SHOWN users."""
    import numpy as np
    from fedbench.config.preflight import checked_compose
    from fedbench.config.validate import params_of, partition_of
    from fedbench.data import DATASETS, make_partition

    cfg = checked_compose(overrides)  # unknown names and bad values: one clear ConfigError
    dataset = DATASETS.get(cfg.dataset.name)(
        root=str(cfg.data.root), download=bool(cfg.data.download),
        **{k: v for k, v in params_of(cfg.dataset).items() if k not in ("root", "download")},
    )
    if dataset.population is not None:  # made on demand: label counts of the first users only
        from fedbench.runs.build import check_population

        pop = dataset.population
        check_population(cfg, pop)
        shown = range(min(pop.num_clients, POPULATION_SHOWN))
        return cfg, dataset, None, np.stack([np.bincount(pop.make(k)[1], minlength=dataset.num_classes) for k in shown])
    labels = dataset.y_train.numpy()
    labels = labels if dataset.task == "classification" else labels.round().astype(int)
    owner = None if dataset.train_owner is None else dataset.train_owner.numpy()
    split_seed, split_params = partition_of(cfg)
    parts = make_partition(cfg.partition.name, labels, cfg.num_clients, split_seed, owner=owner, **split_params)
    width = max(int(labels.max()) + 1, dataset.num_classes)
    counts = np.stack([np.bincount(labels[p], minlength=width) for p in parts])
    return cfg, dataset, parts, counts


# Label names for the figures of the data sets that have them (else the label index is shown).
CLASS_NAMES = {
    "fmnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"],
    "cifar10": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"],
    "har": ["walking", "upstairs", "downstairs", "sitting", "standing", "laying"],
}
STYLES = ("heatmap", "bars")


def save_stacked_bars(counts, path: Path, title: str, class_names: list[str] | None) -> None:
    """The usual partition figure: one bar per client, stacked by label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    n, c = counts.shape
    fig, ax = plt.subplots(figsize=(min(3 + 0.12 * n, 16), 4), layout="constrained")
    cmap = plt.get_cmap("tab10" if c <= 10 else "tab20")
    bottom = np.zeros(n)
    for label in range(c):
        name = class_names[label] if class_names and label < len(class_names) else str(label)
        ax.bar(np.arange(n), counts[:, label], bottom=bottom, width=0.9, color=cmap(label % cmap.N), label=name)
        bottom += counts[:, label]
    ax.set_xlabel("client")
    ax.set_ylabel("samples")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=1 if c <= 10 else 2, bbox_to_anchor=(1.01, 1), loc="upper left")
    from fedbench.core.output_files import save_figure_files

    save_figure_files(fig, [path], "--out", dpi=120, bbox_inches="tight")


def save_heatmap(counts, path: Path, title: str, class_names: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    n, c = counts.shape
    fig, ax = plt.subplots(figsize=(min(2 + 0.35 * c, 16), min(2 + 0.12 * n, 12)), layout="constrained")
    im = ax.imshow(counts, aspect="auto", interpolation="nearest", cmap="viridis")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if class_names and len(class_names) == c:
        ax.set_xticks(range(c), class_names, rotation=60, ha="right", fontsize=7)
    ax.set_xlabel("label")
    ax.set_ylabel("client")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="samples")
    from fedbench.core.output_files import save_figure_files

    save_figure_files(fig, [path], "--out", dpi=120, bbox_inches="tight")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def show(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option("--out", help="PNG path of the client x label heat map.")] = None,
    rows: Annotated[int, typer.Option("--rows", help="Clients listed (0 = all).")] = 30,
    style: Annotated[str, typer.Option("--style", help="heatmap (client x label) or bars (stacked per client).")] = "heatmap",
) -> None:
    """Print per-client sizes and label counts of a split and save its client x label heat map.

    OVERRIDES are the run's Hydra overrides, e.g.
    `fedbench data show dataset=fmnist partition=imbalanced_shards num_clients=200`.
    """
    import numpy as np

    from fedbench.config.validate import partition_of
    from fedbench.data import fingerprint
    from fedbench.core.errors import check
    from fedbench.core.output_files import check_figure_format, check_output_file

    check(rows >= 0, f"--rows must be >= 0 (0 lists every client), got {rows}")
    if style not in STYLES:
        from fedbench.core.errors import unknown_choice

        raise unknown_choice("--style", style, STYLES)
    if out is not None:
        check_figure_format(out, "--out")
        check_output_file(out, "--out")
    cfg, dataset, parts, counts = client_label_counts(list(ctx.args))
    if parts is None:  # a population made on demand: every size is known, labels of the first users counted
        sizes, num_clients, fp = dataset.population.sizes, dataset.population.num_clients, dataset.population.fingerprint
        distinct, total = int(sizes.sum()), int(sizes.sum())
    else:
        sizes, num_clients, fp = counts.sum(1), len(parts), fingerprint(parts)
        distinct, total = len(np.unique(np.concatenate(parts))), len(dataset.y_train)  # some splits reuse samples
    typer.echo(f"dataset={cfg.dataset.name} partition={cfg.partition.name} clients={num_clients} seed={partition_of(cfg)[0]} "
               f"fingerprint={fp}")
    counted = "" if len(counts) == num_clients else f" (labels of the first {len(counts)} users, made on demand)"
    typer.echo(f"train samples assigned: {int(sizes.sum())} ({distinct} distinct) of {total}; "
               f"client size mean {sizes.mean():.2f}, "
               f"stdev {sizes.std(ddof=1) if len(sizes) > 1 else 0.0:.2f}, min {sizes.min()}, max {sizes.max()}; "
               f"labels per client mean {np.count_nonzero(counts, 1).mean():.2f}{counted}")
    shown = range(len(counts)) if rows == 0 else range(min(rows, len(counts)))
    typer.echo(f"{'client':>6} {'size':>7} {'#labels':>7}  label:count")
    for i in shown:
        nz = np.flatnonzero(counts[i])
        typer.echo(f"{i:>6} {sizes[i]:>7} {len(nz):>7}  " + " ".join(f"{c}:{counts[i, c]}" for c in nz))
    if len(shown) < num_clients:
        typer.echo(f"... {num_clients - len(shown)} more" + (" (--rows 0 lists all)" if len(counts) == num_clients else ""))
    path = out or Path("outputs") / "partitions" / f"{cfg.dataset.name}_{cfg.partition.name}_{num_clients}_{fp}.png"
    skew = ", ".join(f"{k}={cfg.partition[k]}" for k in ("alpha", "c", "k", "shards_per_client") if k in cfg.partition)
    title = f"{cfg.dataset.name}, {cfg.partition.name}{f' ({skew})' if skew else ''}, {num_clients} clients, seed {partition_of(cfg)[0]}"
    names = CLASS_NAMES.get(cfg.dataset.name) if dataset.task == "classification" else None
    if style == "bars":
        save_stacked_bars(counts, path, title, names)
    else:
        save_heatmap(counts, path, title, names)
    typer.echo(f"{'heat map' if style == 'heatmap' else 'stacked bars'}: {path}")


def attach(root: typer.Typer) -> None:
    root.add_typer(app, name="data")
