"""A grid's job configs as Hydra's load_sweep_config makes them, composing each set of config files
once. Hydra composes every job from its files (defaults list, YAML, schema merges: ~0.2 s a job);
jobs that choose the same files and differ only in plain values (`eta_l=0.1 seed=2`) get a copy of
that composition with their values set as Hydra sets them (config.preflight.set_values), and the job fields Hydra
derives from the overrides (hydra.overrides.task, hydra.job.override_dirname) set as Hydra sets them.
Anything else (+key, ~key, key@pkg, a value that Hydra rejects) is composed by Hydra."""

from __future__ import annotations

import copy
from collections.abc import Callable


class SweepComposer:
    """`compose(master_config, sweep_overrides)`: Hydra's load_sweep_config (the loader's, unwrapped);
    calling this gives what it gives, composing only once per master config and set of files."""

    def __init__(self, compose: Callable):
        self.compose = compose
        self.bases: dict[tuple[int, tuple[str, ...]], object] = {}
        self.groups: dict[int, set[str]] = {}  # per master config: the config groups of its composition

    def __call__(self, master_config, sweep_overrides: list[str]):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(sweep_overrides))
        groups = self.groups.get(id(master_config))
        if groups is None or any(o.is_add() or o.is_force_add() or o.is_delete() or o.package is not None for o in parsed):
            return self._composed(master_config, sweep_overrides)
        files = [o for o in parsed if o.is_hydra_override() or "/" in o.key_or_group or o.key_or_group in groups]
        values = [o for o in parsed if o not in files]
        key = (id(master_config), tuple(o.input_line for o in files))
        if key not in self.bases:
            self.bases[key] = self.compose(master_config, [o.input_line for o in files])
        from omegaconf import OmegaConf

        cfg = copy.deepcopy(self.bases[key])  # a job's own: the launcher sets its hydra.job.id
        if not values:  # the base is this job's composition
            return cfg
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)  # as load_sweep_config does
        try:
            self._set_values(cfg, values, [o for o in parsed if not o.is_hydra_override()])
        except Exception:  # Hydra's composition raises its own error (or takes what the copy did not)
            return self._composed(master_config, sweep_overrides)
        return cfg

    def _composed(self, master_config, sweep_overrides):
        cfg = self.compose(master_config, list(sweep_overrides))
        self.groups.setdefault(id(master_config), set(cfg.hydra.runtime.choices))
        return cfg

    @staticmethod
    def _set_values(cfg, values, task) -> None:
        """What Hydra's _load_configuration_impl does with a job's overrides after composing its files."""
        from hydra._internal.config_loader_impl import get_overrides_dirname

        from fedbench.config.preflight import set_values

        if not set_values(cfg, values):
            raise ValueError("a value Hydra's composition reports")  # composed by Hydra instead
        cfg.hydra.overrides.task = [o.input_line for o in task]
        dirname = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = get_overrides_dirname(overrides=task, kv_sep=dirname.kv_sep,
                                                               item_sep=dirname.item_sep, exclude_keys=dirname.exclude_keys)
