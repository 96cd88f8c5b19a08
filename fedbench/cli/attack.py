"""`fedbench attack dlg`: the DLG evaluation of LoSAC §5.4 (Fig. 6) for a list of algorithms."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Privacy attacks on what algorithms transmit.", no_args_is_help=True)

DLG_EXAMPLES = """
Examples:

  fedbench attack dlg --algorithms dsgd,mimesvrg,fedavg,scaffold,losac dataset=fmnist data.binary_classes=[0,1,2,3,4]

  fedbench attack dlg --algorithms fedsgd,fedavg --optimizer lbfgs dataset=digits data.binary_classes=[0]
"""

# losac.md §5.4: binary logistic regression, N = S = 100, M = 1 (full local batch), IID, T = 5.
DLG_DEFAULTS = [
    "model=mclr", "partition=iid", "num_clients=100", "clients_per_round=100", "batch_size=0",
    "local_epochs=null", "local_steps=5", "loss_scale=sum", "eta_l=1e-4", "eval_every=0",
]


@app.command("dlg", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, epilog=DLG_EXAMPLES)
def dlg(
    ctx: typer.Context,
    algorithms: Annotated[str, typer.Option(help="Comma-separated algorithms to attack.")] = "fedsgd,fedavg",
    attack_round: Annotated[int, typer.Option("--round", help="Round r whose upload is attacked.")] = 5,
    iterations: Annotated[int, typer.Option(help="Attack iterations.")] = 100,
    attack_lr: Annotated[float, typer.Option(help="Attack step size eta_d.")] = 1e-3,
    optimizer: Annotated[str, typer.Option(help="gd (the paper's) or lbfgs.")] = "gd",
    init: Annotated[str, typer.Option(help="Dummy data init: normal or zeros.")] = "normal",
    out: Annotated[Path, typer.Option(help="Folder for the curves (CSV, PNG).")] = Path("outputs/attacks"),
) -> None:
    """Run DLG against each algorithm's upload at a round; OVERRIDES are Hydra overrides.

    Defaults follow the LoSAC paper's §5.4 (binary logistic regression, full participation,
    full local batch); give data.binary_classes=[...] to turn a data set into a binary task.
    """
    import pandas as pd
    from fedbench.attacks.record import recorded_attack
    from fedbench.config.preflight import checked_compose
    from fedbench.config.schema import MAX_INT64
    from fedbench.core.errors import ConfigError
    from fedbench.tracking.store import quiet_libraries

    import math

    names = [a.strip() for a in algorithms.split(",") if a.strip()]
    if not names:
        raise ConfigError(f"--algorithms names no algorithm (got {algorithms!r}); e.g. --algorithms fedsgd,fedavg")
    if not (math.isfinite(attack_lr) and attack_lr > 0):
        raise ConfigError(f"--attack-lr must be a finite number > 0, got {attack_lr}")
    if optimizer not in ("gd", "lbfgs"):
        raise ConfigError(f"Unknown optimizer {optimizer!r}. Available: gd, lbfgs.")
    if init not in ("normal", "zeros"):
        raise ConfigError(f"Unknown init {init!r}. Available: normal, zeros.")
    if not (1 <= attack_round <= MAX_INT64 and 1 <= iterations <= MAX_INT64):
        raise ConfigError(f"--round and --iterations must be integers in [1, 2**63 - 1], got {attack_round} and {iterations}")
    configs = {}
    for name in names:  # every configuration is checked before any training
        overrides = [*DLG_DEFAULTS, "tracking.experiment=dlg", *ctx.args, f"algorithm={name}"]
        configs[name] = checked_compose(overrides)
    quiet_libraries()
    curves = {}
    folder = out / datetime.now().strftime("dlg-%Y%m%d-%H%M%S")
    try:
        out.mkdir(parents=True, exist_ok=True)
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create a folder in --out {out}: {exc.strerror or exc}; set --out") from None
    for name, cfg in configs.items():
        errors = curves[name] = recorded_attack(cfg, attack_round, iterations, attack_lr, optimizer, init)
        typer.echo(f"{name:<12} e_0 = {errors[0]:.4f}   e_{iterations} = {errors[-1]:.4f}   ({errors[-1] / errors[0] - 1:+.1%})")
    frame = pd.DataFrame(curves)
    frame.index.name = "iteration"
    from fedbench.core.output_files import write_output

    write_output(folder / "dlg_curves.csv", frame.to_csv())
    _plot(frame, folder / "dlg_curves.png")
    typer.echo(f"curves: {folder / 'dlg_curves.csv'}, {folder / 'dlg_curves.png'}", err=True)


def _plot(frame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6), layout="constrained")
    for name in frame:
        ax.plot(frame.index, frame[name], label=name)
    ax.set_xlabel("attack iteration")
    ax.set_ylabel(r"$\|\hat D_1 - D_1\|_F$")
    ax.legend()
    ax.grid(alpha=0.3)
    from fedbench.core.output_files import save_figure_files

    save_figure_files(fig, [path], dpi=110, bbox_inches="tight")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())


def attach(root: typer.Typer) -> None:
    root.add_typer(app, name="attack")
