""""Did you mean" that follows what users type: the common spellings of a data set or model
(fashion_mnist, Fashion-MNIST, cifar-10) lead to its fedbench name, a plain name is preferred to a
paper's variant of it (`fmnist` before `fedadmm/fmnist`), and a key typed at the top that exists one
level down (`mu=0.1`) points to its full name (`algorithm.mu`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path

# spellings users type (as squashed: lower case, no `-`, `_`, space or `.`) -> fedbench's name
ALIASES = {
    "fashionmnist": "fmnist", "cifar": "cifar10", "tinyimagenet200": "tinyimagenet",
    "sentiment140": "sent140", "resnet18": "resnet18_gn",
    "resnet": "resnet18_gn", "mlp": "mlp_2nn", "2nn": "mlp_2nn", "logisticregression": "logreg",
    "multinomiallogisticregression": "mclr", "dir": "dirichlet",
}


def squashed(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch not in "-_ .")


def closest(value: object, choices: Iterable[str]) -> str | None:
    """The choice `value` most likely means: an alias or the same name spelled otherwise, else the closest
    by difflib among the plain names (no `paper/` prefix) and then among all; None when nothing is close."""
    choices = list(choices)
    plain = [c for c in choices if "/" not in c]
    typed = squashed(value)
    target = ALIASES.get(typed, typed)
    for pool in (plain, choices):
        same = [c for c in pool if squashed(c) == target]
        if same:
            return same[0]
    for pool in (plain, choices):
        close = difflib.get_close_matches(str(value), pool, n=1)
        if close:
            return close[0]
    return None


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """' Did you mean 'fmnist'?' (closest), or ''."""
    best = closest(value, choices)
    return f" Did you mean {best!r}?" if best is not None else ""


def unknown_choice(kind: str, value: object, choices: Iterable[str]):
    """core.errors.unknown_choice with this module's suggestion."""
    from fedbench.core.errors import ConfigError

    choices = sorted(choices)
    return ConfigError(f"Unknown {kind} {value!r}. Available: {', '.join(choices)}.{did_you_mean(value, choices)}")


def nested_key(key: str, config: Mapping) -> str | None:
    """`section.key` where `key` is a key of one of the config's sections (algorithm.mu), or None."""
    for section, values in config.items():
        if isinstance(values, Mapping) and key in values:
            return f"{section}.{key}"
    return None


def group_files_with_key(conf_dir: Path, key: str, groups: Iterable[str], extra_dirs: Iterable[Path] = ()) -> dict[str, list[str]]:
    """Per config group, the choices whose file sets `key` at its top (fedprox and feddyn set `mu`)."""
    import yaml

    from fedbench.core.user_files import is_config_file
    from fedbench.core.user_yaml import load_yaml

    found: dict[str, list[str]] = {}
    for group in groups:
        for base in (conf_dir / group, *(Path(d) / group for d in extra_dirs)):
            for path in sorted(base.rglob("*.yaml")):
                if not is_config_file(path):
                    continue
                try:
                    values = load_yaml(path.read_text())
                except (OSError, yaml.YAMLError):
                    continue
                if isinstance(values, dict) and key in values:
                    found.setdefault(group, []).append(str(path.relative_to(base).with_suffix("")))
    return found


def one_level_down(key: str, config: Mapping | None, conf_dir: Path, groups: Iterable[str],
                   extra_dirs: Iterable[Path] = ()) -> str:
    """' Did you mean 'algorithm.mu'?' for a top-level `key` that the job's config has one level down;
    else ' It is a key of algorithm=fedprox, feddyn (algorithm.mu).' when some group choices have it; else ''."""
    if config is not None and (full := nested_key(key, config)) is not None:
        return f" Did you mean {full!r}?"
    found = group_files_with_key(conf_dir, key, groups, extra_dirs)
    if not found:
        return ""
    group, names = next(iter(found.items()))
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return f" It is a key of {group}={shown}: choose one and set {group}.{key}."
