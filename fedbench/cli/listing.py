"""`fedbench list`: every choice of every config group, without importing torch."""

from __future__ import annotations

from pathlib import Path

import typer

from fedbench.config.compose import conf_dir, group_choices_of

def list_choices() -> None:
    """List the available algorithms, data sets, partitions and models, one line each."""
    from fedbench.core.registry import declared  # the registrations read from source: no torch import

    for title, group in (("algorithms", "algorithm"), ("datasets", "dataset"), ("partitions", "partition"), ("models", "model")):
        typer.echo(f"{title}:")
        described = declared(group)
        for name, doc in described.items():
            if title == "datasets" and name == "fmnist":
                from fedbench.data.locations import fmnist_folder

                found = fmnist_folder()
                doc += f" [found: {found}]" if found else " [not found: apt-get install dataset-fashion-mnist]"
            typer.echo(f"  {name:<16} {doc}")
            if title == "algorithms" and (imposed := imposed_settings(conf_dir() / "algorithm" / f"{name}.yaml")):
                shown = ', '.join(f"{k}={'null' if v is None else v}" for k, v in imposed.items())
                typer.echo(f"  {'':<16}   imposes: {shown}")
        variants = _variants(group, list(described))
        if variants:
            typer.echo(f"{group} variants ({group}=<file>: a registered {group} with other defaults):")
            for stem, name, comment in variants:
                typer.echo(f"  {stem:<16} -> {name}: {comment[:100]}")
    presets = sorted(str(p.relative_to(conf_dir() / "experiment").with_suffix(""))
                     for p in (conf_dir() / "experiment").rglob("*.yaml"))
    typer.echo("experiments (experiment=<name>: a paper's setting; fedbench reproduce list shows the claims):")
    for i in range(0, len(presets), 5):
        typer.echo("  " + "  ".join(f"{p:<22}" for p in presets[i:i + 5]).rstrip())


def _variants(group: str, registered: list[str]) -> list[tuple[str, str, str]]:
    """Config files of a group that are not a registered name: (file, the registered name it selects,
    its first comment line)."""
    import yaml

    out = []
    for path in sorted((conf_dir() / group).rglob("*.yaml")):
        stem = str(path.relative_to(conf_dir() / group).with_suffix(""))
        if stem in registered:
            continue
        raw = yaml.safe_load(path.read_text()) or {}
        name = (raw.get("algorithm") or {}).get("name") if group == "algorithm" and "algorithm" in raw else raw.get("name")
        base = next((d for d in raw.get("defaults", []) if isinstance(d, str) and d != "_self_"), None)
        # a variant that extends another file: fedavg/adam ([/algorithm/fedavg@_here_])
        name = name or (base and base.split("@")[0].rsplit("/", 1)[-1])
        comment = next((ln.lstrip("# ").strip() for ln in path.read_text().splitlines()
                        if ln.startswith("#") and "@package" not in ln), "")
        out.append((stem, str(name), comment))
    return out


def imposed_settings(path: Path) -> dict[str, str]:
    """The run settings an algorithm's config file imposes (`algorithm.imposes`), with their values:
    top-level keys of the file, or group choices from its defaults list."""
    import yaml  # plain YAML (interpolations stay text): cheaper than OmegaConf for `fedbench list`

    if not path.is_file():
        return {}
    raw = yaml.safe_load(path.read_text()) or {}
    keys = (raw.get("algorithm") or {}).get("imposes") or []
    choices = group_choices_of(raw.get("defaults"))
    return {k: raw[k] if k in raw else choices.get(k) for k in keys}




def attach(root: typer.Typer) -> None:
    root.command("list")(list_choices)
