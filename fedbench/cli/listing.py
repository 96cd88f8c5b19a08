"""`fedbench list`: every choice of every config group, without importing torch."""

from __future__ import annotations

from pathlib import Path

import typer

from fedbench.config.compose import conf_dir, group_choices_of

GROUPS = (("algorithms", "algorithm"), ("datasets", "dataset"), ("partitions", "partition"), ("models", "model"))


def list_choices() -> None:
    """List the available algorithms, data sets, partitions and models: the generic choices one line
    each (an algorithm's variants `<name>/<variant>` beneath it), then one line per paper with the
    choices `<paper>/<name>` of that paper's setting."""
    from fedbench.core.registry import declared  # the registrations read from source: no torch import

    for title, group in GROUPS:
        described = declared(group)
        files = config_options(group)
        top = [f for f in files if "/" not in f]
        nested: dict[str, list[str]] = {}
        for f in files:
            if "/" in f:
                folder, rest = f.split("/", 1)
                nested.setdefault(folder, []).append(rest)
        width = max(16, *(len(f) + 1 for f in top))
        _echo(f"{title} ({group}=<name>):")
        for name in top:
            if name in described:
                doc = described[name]
            else:  # a file that selects another registered name with other defaults (cifar10_half)
                selected, comment = selected_name(group, name)
                doc = comment if selected == name and "[plugin: " in comment else f"-> {selected}: {comment}"
            if name == "fmnist" and group == "dataset":
                from fedbench.data.locations import fmnist_folder

                found = fmnist_folder()
                doc += f" [found: {found}]" if found else " [not found: apt-get install dataset-fashion-mnist]"
            _echo_row(f"  {name:<{width}} ", doc)
            _echo_imposed(group, name, width)
            for variant in nested.pop(name, []) if group == "algorithm" else []:  # algorithm/<name>/<variant>
                option = f"{name}/{variant}"
                _echo_row(f"    {option:<{width - 2}} ", selected_name(group, option)[1])
                _echo_imposed(group, option, width)
        if nested:  # <group>/<paper>/<name>: a paper's own data sets and models
            _echo(f"{title} of one paper's setting ({group}=<paper>/<name>):")
            for paper, names in sorted(nested.items()):
                _echo(f"  {paper:<{width}} {', '.join(names)}")
    presets = config_options("experiment")
    _echo_row("", "experiments (experiment=<name>: a paper's setting; fedbench reproduce list shows the claims):")
    per_line = max(1, ((_columns() or 122) - 2) // 24)
    for i in range(0, len(presets), per_line):
        _echo("  " + "  ".join(f"{p:<22}" for p in presets[i:i + per_line]).rstrip())


def _echo(text: str) -> None:
    """A line of the listing: names and comments of config folders' files (FEDBENCH_CONF, a plugin's, someone
    else's copy) act on no terminal (core.terminal)."""
    from fedbench.core.terminal import printable

    typer.echo(printable(text))


def _columns() -> int | None:
    """The terminal's width (or COLUMNS); None into a pipe or a file: one whole line per entry, for grep."""
    import os
    import shutil
    import sys

    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _echo_row(lead: str, text: str) -> None:
    """`lead` then `text`, wrapped to the terminal's width with its next lines under its first: every word
    of a description shows, none is cut (into a pipe: on one line)."""
    import textwrap

    columns = _columns()
    if columns is None or not text:
        _echo(f"{lead}{text}".rstrip())
        return
    _echo(textwrap.fill(text, max(columns, len(lead) + 30), initial_indent=lead,
                             subsequent_indent=" " * len(lead), break_long_words=False, break_on_hyphens=False))


def config_folders() -> list[Path]:
    """The config folders `fedbench run` searches without --config-dir: the packaged tree (or FEDBENCH_CONF),
    then the installed packages' plugins (entry-point group fedbench.plugins)."""
    from fedbench.config.plugins import installed_config_dirs

    return [conf_dir(), *installed_config_dirs()]


def config_options(group: str) -> list[str]:
    """The choices of a config group: its files, as `<name>` or `<folder>/<name>`."""
    from fedbench.config.compose import group_choices

    first, *others = config_folders()
    return group_choices(first, group, tuple(others))


def config_file(group: str, option: str) -> Path:
    """The file of a choice: the first folder that has it, as Hydra searches them."""
    return next((f for base in config_folders() if (f := base / group / f"{option}.yaml").is_file()),
                conf_dir() / group / f"{option}.yaml")


def selected_name(group: str, option: str) -> tuple[str, str]:
    """The registered name a config file selects (its `name`, or the file its defaults extend) and
    its first comment line; a plugin's (its `_target_`) says so."""
    from fedbench.core.user_yaml import load_yaml

    text = config_file(group, option).read_text()
    raw = _mapping(load_yaml(text))  # a file of a bare value or list lists as a name only (`run` names it)
    section = raw.get(group) if isinstance(raw.get(group), dict) else raw  # an @package _global_ algorithm file
    base = next((d for d in _listed(raw.get("defaults")) if isinstance(d, str) and d != "_self_"), "")
    # a variant that extends another file: fedavg/adam ([/algorithm/fedavg@_here_])
    name = section.get("name") or base.split("@")[0].rsplit("/", 1)[-1]
    comment = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("#") and "@package" not in ln), "")
    if isinstance(section, dict) and section.get("_target_"):
        comment = f"{comment} [plugin: {section['_target_']}]".strip()
    return str(name), comment


def _echo_imposed(group: str, option: str, width: int) -> None:
    if group == "algorithm" and (imposed := imposed_settings(config_file("algorithm", option))):
        shown = ", ".join(f"{k}={'null' if v is None else v}" for k, v in imposed.items())
        _echo_row(f"  {'':<{width}}   ", f"imposes: {shown}")


def imposed_settings(path: Path) -> dict[str, str]:
    """The run settings an algorithm's config file imposes (`algorithm.imposes`), with their values:
    top-level keys of the file, or group choices from its defaults list."""
    from fedbench.core.user_yaml import load_yaml  # plain YAML (interpolations stay text): cheaper than OmegaConf

    if not path.is_file():
        return {}
    raw = _mapping(load_yaml(path.read_text()))
    keys = [k for k in _listed(_mapping(raw.get("algorithm")).get("imposes")) if isinstance(k, str)]
    choices = group_choices_of(_listed(raw.get("defaults")))
    return {k: raw[k] if k in raw else choices.get(k) for k in keys}


def _mapping(value) -> dict:
    """A config file's (or section's) keys; {} for a bare value or list (a user's file: `list` was its traceback)."""
    return value if isinstance(value, dict) else {}


def _listed(value) -> list:
    return value if isinstance(value, list) else []




def attach(root: typer.Typer) -> None:
    root.command("list")(list_choices)
