"""The config directory and the one way to compose a run's config from overrides."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

def packaged_conf() -> Path:
    """The config tree: `conf/` at the top of a source checkout, or `fedbench/conf/` in an installed wheel
    (setup.py maps the one tree there)."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "conf"
    return installed if installed.is_dir() else package.parent / "conf"


PACKAGED_CONF = packaged_conf()


def conf_dir_from_env() -> Path:
    """FEDBENCH_CONF as a user means it: a path relative to the current folder, `~` expanded, and
    empty (FEDBENCH_CONF= in a script) the same as unset: the packaged configs."""
    value = os.environ.get("FEDBENCH_CONF", "").strip()
    return Path(value).expanduser().resolve() if value else PACKAGED_CONF


CONF_DIR = conf_dir_from_env()


def conf_dir() -> Path:
    """The config directory, read at call time (FEDBENCH_CONF, or a test, may point it elsewhere)."""
    return CONF_DIR


def checked_conf_dir() -> Path:
    """The config directory, refused in one line when it holds no config.yaml, or a FIFO, device or folder for a
    *.yaml (core.user_files)."""
    from fedbench.core.errors import ConfigError
    from fedbench.core.user_files import is_config_file

    directory = conf_dir()
    if not is_config_file(directory / "config.yaml"):
        origin = "FEDBENCH_CONF" if directory != PACKAGED_CONF else "the installed package"
        raise ConfigError(f"no config.yaml in the config directory {directory} (from {origin}); point FEDBENCH_CONF "
                          "at a copy of conf/, or unset it to use the packaged configs")
    for path in directory.rglob("*.yaml"):  # every file Hydra may compose from
        is_config_file(path)
    return directory


def group_choices_of(defaults: list | None) -> dict[str, str]:
    """The group choices a config file's defaults list makes (`override /algorithm: x` -> algorithm: x),
    read from plain YAML (no composition)."""
    return {key.removeprefix("override ").strip().lstrip("/"): value
            for entry in defaults or [] if isinstance(entry, dict) for key, value in entry.items()}


def register_resolvers() -> None:
    """`${pid:}` in hydra.run.dir: runs started in the same second get folders of their own. Every YAML that
    OmegaConf reads from here on (Hydra's config files included) is composed within core.user_yaml's bounds."""
    from omegaconf import OmegaConf

    bound_yaml()

    if not OmegaConf.has_resolver("pid"):
        OmegaConf.register_new_resolver("pid", os.getpid)


def bound_yaml() -> None:
    """Every YAML that OmegaConf reads (OmegaConf.load/create, hence every config file Hydra composes) composed
    within core.user_yaml's bounds (idempotent). OmegaConf makes its loader class on each call
    (omegaconf._utils.get_yaml_loader); it is wrapped once, and its own checks (duplicate keys, its float and
    timestamp rules) stay."""
    import omegaconf._utils as utils
    import omegaconf.basecontainer as basecontainer

    from fedbench.core.user_yaml import bounded

    make = utils.get_yaml_loader
    if getattr(make, "bounded_yaml", False):
        return
    cache: list = []

    def get_yaml_loader():
        if not cache:
            cache.append(bounded(make()))
        return cache[0]

    get_yaml_loader.bounded_yaml = True
    utils.get_yaml_loader = get_yaml_loader
    basecontainer.get_yaml_loader = get_yaml_loader


def compose(overrides: list[str] | tuple[str, ...] = (), return_hydra_config: bool = False,
            directory: Path | None = None) -> DictConfig:
    """The config `fedbench run OVERRIDES` would run, from `directory` (default: conf_dir()); Hydra's
    composition errors become one ConfigError line. Checked as `fedbench run` checks a command line:
    config.preflight.checked_compose."""
    register_resolvers()
    return _composed(directory or conf_dir(), list(overrides), return_hydra_config)


def _composed(directory: Path, overrides: list[str], with_hydra: bool) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    from fedbench.core.errors import ConfigError, unknown_choice

    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            return hydra_compose("config", overrides=overrides, return_hydra_config=with_hydra)
    except MissingConfigException as exc:  # an unknown choice of a group (hydra/launcher=foo): name the valid ones
        missing = re.search(r"Could not find '(.+)/([^/']+)'", str(exc))
        if missing and exc.options:
            raise unknown_choice(missing.group(1), missing.group(2), exc.options) from None
        raise ConfigError(str(exc).splitlines()[0]) from None
    except OverrideParseException as exc:
        raise ConfigError(f"cannot parse the overrides: {str(exc).splitlines()[0]} "
                          "(see https://hydra.cc/docs/advanced/override_grammar/basic)") from None
    except ConfigCompositionException as exc:
        cause = exc.__cause__ or exc
        if "not in struct" in str(cause) and getattr(cause, "full_key", None):
            _not_in_config(directory, overrides, cause.full_key)
        if hydra_key := re.match(r"Could not override '(hydra\.[^']+)'", str(exc)):
            _not_in_config(directory, overrides, hydra_key.group(1))
        raise ConfigError(f"{str(exc).splitlines()[0]} ({str(cause).splitlines()[0]})") from None
    except ValueError as exc:  # e.g. engine=null: a group that cannot be left out
        nulled = [o for o in overrides if re.fullmatch(r"[\w/]+=null", o) and (directory / o.split("=")[0]).is_dir()]
        if nulled and "Got NoneType" in str(exc):  # experiment=null (its default) and scale=null too: Hydra's words named neither
            group = nulled[0].split("=")[0]
            raise ConfigError(f"{nulled[0]}: a config group is chosen by name, and null names none; leave {group} out "
                              f"for its default, or choose one of: {', '.join(group_choices(directory, group))}") from None
        raise ConfigError(f"cannot compose the config: {exc}") from None
    except OSError as exc:  # OmegaConf.load of a file holding a bare number or string: its own traceback, exit 1
        if not str(exc).startswith("Invalid loaded object type"):
            raise
        raise ConfigError(f"{_loaded_file(exc) or 'a config file'} holds a bare value ("
                          f"{str(exc).rsplit(' ', 1)[-1]}), not a mapping of keys: fix the file (a config under the "
                          "config directory, FEDBENCH_CONF or --config-dir)") from None
    except Exception as exc:
        malformed = malformed_yaml(exc)
        if malformed is None:
            raise
        raise malformed from None


def _loaded_file(exc: BaseException) -> str | None:
    """The file Hydra's file source was loading when `exc` was raised (its frame's `full_path`)."""
    tb, path = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "load_config" and isinstance(tb.tb_frame.f_locals.get("full_path"), str):
            path = tb.tb_frame.f_locals["full_path"]
        tb = tb.tb_next
    return path


def malformed_yaml(exc: BaseException):
    """A ConfigError naming the file, line and problem of a YAML syntax error (raised by PyYAML under
    Hydra or OmegaConf), or None for any other exception."""
    from fedbench.core.errors import ConfigError

    error = exc
    while error is not None and not type(error).__module__.startswith("yaml"):
        error = error.__cause__ or error.__context__
    if error is None:
        return None
    mark = getattr(error, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "a config file"
    problem = " ".join(str(getattr(error, "problem", None) or error).split())
    return ConfigError(f"malformed YAML in {where}: {problem}; fix the file (a config under the config directory, "
                       "FEDBENCH_CONF or --config-dir)")


def _not_in_config(directory: Path, overrides: list[str], key: str) -> None:
    """An override of a key the composed config lacks: added (+key=value), the key is checked like
    any other (an unknown one gets its did-you-mean); a known one only needs the `+`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from fedbench.config.checker import unknown_key
    from fedbench.config.renames import moved_message
    from fedbench.config.validate import validate
    from fedbench.core.errors import ConfigError

    item = next((o for o in overrides if o.split("=", 1)[0] == key), None)
    if item is None:
        return
    if key.startswith("hydra."):  # Hydra's settings and plugins' options: a key they lack is unknown
        section, _, name = key.rpartition(".")
        try:
            with initialize_config_dir(config_dir=str(directory), version_base=None):
                full = hydra_compose("config", overrides=[o for o in overrides if o is not item], return_hydra_config=True)
            known = list(OmegaConf.select(full, section).keys())
        except Exception:
            return
        raise unknown_key(section, name, [k for k in known if not str(k).startswith("_")])
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


def group_choices(conf_dir: Path, group: str, extra_dirs: tuple[Path, ...] = ()) -> list[str]:
    """The options of a config group: its files under the config directory and any --config-dir."""
    from fedbench.core.user_files import is_config_file

    names = set()
    for base in (conf_dir / group, *(d / group for d in extra_dirs)):
        names.update(str(p.relative_to(base).with_suffix("")) for p in base.rglob("*.yaml") if is_config_file(p))
    return sorted(names)
