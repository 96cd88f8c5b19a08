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


def register_resolvers() -> None:
    """`${pid:}` in hydra.run.dir: runs started in the same second get folders of their own."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("pid"):
        OmegaConf.register_new_resolver("pid", os.getpid)


def compose(overrides: list[str] | tuple[str, ...] = (), checked: bool = False,
            return_hydra_config: bool = False) -> DictConfig:
    """The config `fedbench run OVERRIDES` would run. With `checked`, the command line is first
    checked as `fedbench run` checks it (config.preflight: one ConfigError before any work)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_resolvers()
    if checked:
        from fedbench.config.preflight import preflight

        preflight(conf_dir(), list(overrides))
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)
