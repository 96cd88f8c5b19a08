"""Installed fedbench plugins on Hydra's config search path: the config folders that packages declare in the
entry-point group `fedbench.plugins` (fedbench.config.plugins.installed_config_dirs), searched after the
packaged configs and any --config-dir, by every composition of fedbench's config (run, grids, resume, the
Python API, preflight). Hydra's own SearchPathPlugin mechanism; other Hydra apps are left as they are."""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class FedbenchPluginsSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from pathlib import Path

        from fedbench.config.plugins import installed_config_dirs

        mains = [Path(e.path.removeprefix("file://")) for e in search_path.get_path()
                 if e.provider == "main" and e.path and (e.path.startswith("file://") or "://" not in e.path)]
        if not any((m / "config.yaml").is_file() and (m / "algorithm").is_dir() for m in mains):
            return  # not fedbench's config tree: another Hydra app in this environment
        for folder in installed_config_dirs():
            search_path.append("fedbench-plugin", f"file://{folder}")
