"""The config directory and the one way to compose a run's config from overrides."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

CONF_DIR = Path(os.environ.get("FEDBENCH_CONF", Path(__file__).resolve().parent / "conf"))


def conf_dir() -> Path:
    """The config directory, read at call time (FEDBENCH_CONF, or a test, may point it elsewhere)."""
    return CONF_DIR


def group_choices_of(defaults: list | None) -> dict[str, str]:
    """The group choices a config file's defaults list makes (`override /algorithm: x` -> algorithm: x),
    read from plain YAML (no composition)."""
    return {key.removeprefix("override ").strip().lstrip("/"): value
            for entry in defaults or [] if isinstance(entry, dict) for key, value in entry.items()}


def register_resolvers() -> None:
    """`${pid:}` in hydra.run.dir: runs started in the same second get folders of their own."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("pid"):
        OmegaConf.register_new_resolver("pid", os.getpid)


def compose(overrides: list[str] | tuple[str, ...] = (), checked: bool = False,
            return_hydra_config: bool = False, directory: Path | None = None) -> DictConfig:
    """The config `fedbench run OVERRIDES` would run, from `directory` (default: conf_dir()); Hydra's
    composition errors become one ConfigError line. With `checked`, the command line is first checked
    as `fedbench run` checks it (config.preflight: one ConfigError before any work)."""
    directory = directory or conf_dir()
    register_resolvers()
    if checked:
        from fedbench.config.preflight import preflight

        preflight(directory, list(overrides))
    return _composed(directory, list(overrides), return_hydra_config)


def _composed(directory: Path, overrides: list[str], with_hydra: bool) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException, MissingConfigException

    from fedbench.core.errors import ConfigError

    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            return hydra_compose("config", overrides=overrides, return_hydra_config=with_hydra)
    except MissingConfigException as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    except ConfigCompositionException as exc:
        cause = exc.__cause__ or exc
        if "not in struct" in str(cause) and getattr(cause, "full_key", None):
            _not_in_config(directory, overrides, cause.full_key)
        raise ConfigError(f"{str(exc).splitlines()[0]} ({str(cause).splitlines()[0]})") from None
    except ValueError as exc:  # e.g. engine=null: a group that cannot be left out
        raise ConfigError(f"cannot compose the config: {exc}") from None


def _not_in_config(directory: Path, overrides: list[str], key: str) -> None:
    """An override of a key the composed config lacks: added (+key=value), the key is checked like
    any other (an unknown one gets its did-you-mean); a known one only needs the `+`."""
    from fedbench.config.validate import validate
    from fedbench.core.errors import ConfigError

    from fedbench.config.renames import moved_message

    item = next((o for o in overrides if o.split("=", 1)[0] == key), None)
    if item is None:
        return
    if message := moved_message(key, item.split("=", 1)[1]):
        raise ConfigError(message)  # a key that moved (config.renames), e.g. algorithm.weight_decay
    try:
        cfg = _composed(directory, [f"+{o}" if o is item else o for o in overrides], False)
    except ConfigError:
        return
    validate(cfg)
    raise ConfigError(f"{key} is not in this config (its group's file does not set it): add it with +{item}")


def quoted_override(key: str, value: str) -> str:
    """`key='value'` in Hydra's override grammar for any string value (a path)."""
    return f"{key}={quoted_value(value)}"


def quoted_value(value: str) -> str:
    """Any string (a path with `,`, `=`, brackets, spaces, quotes, `${`) as one value of Hydra's override grammar:
    quoted, with a quote and `${` escaped and the backslashes before them (or at the end) doubled."""
    import re

    escape = {"'": "\\'", "${": "\\${", "": ""}
    return "'" + re.sub(r"(\\*)('|\$\{|$)", lambda m: m.group(1) * 2 + escape[m.group(2)], value) + "'"
