"""A user's own algorithm, data set, partition or model: a group's yaml names its code by import path with
Hydra's `_target_` key, beside `name` and its parameters as in the built-in yamls:

    # my_conf/algorithm/myavg.yaml           fedbench run --config-dir my_conf algorithm=myavg
    _target_: myfl.MyAvg
    name: myavg
    beta: 0.9

The object is located with Hydra's own `_target_` machinery (hydra.utils.get_object) and adopted into its
group's registry under `name`, so every later step (validation of its parameters against its signature,
the build, a launcher's job in another process, resume) finds it by name like a built-in. The parameters are
then passed as the built-ins' are, not by hydra.utils.instantiate: the engine fills a factory's leading
arguments (a model's input shape, a partition's labels), and the config's own checks name a bad key first.

Where the module is found: as Hydra users expect of `python my_app.py`, the folder the command runs in
is searched, with PYTHONPATH and the installed packages (a console script such as `fedbench` does not have
the current folder on sys.path: it is appended there when a target is located, after the installed packages,
so that a file of the folder never shadows one of them). `fedbench resume` finds the module the same way:
resume from the same folder, or put the module's folder on PYTHONPATH.

An installed package declares its config folder in the entry-point group `fedbench.plugins`
(installed_config_dirs); hydra_plugins/fedbench_plugins puts it on Hydra's search path."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedbench.core.errors import ConfigError
from fedbench.core.origin import qualified_name, source_line

TARGET = "_target_"

# what each group's object must be, in words, for the message of one that is not
KINDS = {
    "algorithm": "a subclass of fedbench.algorithms.Algorithm",
    "dataset": "a callable returning a fedbench.data.Dataset (like the built-ins of fedbench/data/datasets.py)",
    "partition": "a callable (labels, num_clients, rng, **parameters) -> per-client index lists",
    "model": "a callable (input_shape, num_classes, **parameters) -> a torch.nn.Module",
}


ENTRY_POINTS = "fedbench.plugins"


def installed_config_dirs() -> tuple[Path, ...]:
    """The config folders installed packages declare in the entry-point group `fedbench.plugins`, each entry
    naming a package folder of config groups (`fednova = "fednova_plugin.conf"`: fednova_plugin/conf/algorithm/
    fednova.yaml, whose `_target_` names the class). Found without importing the packages (`fedbench list`
    stays light); searched after the packaged configs and --config-dir (hydra_plugins/fedbench_plugins)."""
    return _declared_config_dirs(_installed_state())


def _installed_state() -> tuple[tuple[str, int, int], ...]:
    """What the entry points are read from: the folders of sys.path, each with its time of change and its
    count of links (installing or removing a package adds or removes its metadata folder there)."""
    state = []
    for entry in sys.path:
        try:
            st = os.stat(entry or ".")
            state.append((entry, st.st_mtime_ns, st.st_nlink))
        except OSError:
            state.append((entry, -1, -1))
    return tuple(state)


@functools.lru_cache(maxsize=8)
def _declared_config_dirs(state: tuple[tuple[str, int, int], ...]) -> tuple[Path, ...]:
    """installed_config_dirs for one installed state: every composition reads it (reading every installed
    package's metadata, tens of milliseconds, was a tenth of composing a config)."""
    from importlib.metadata import entry_points

    dirs = []
    for entry in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        folder = package_folder(entry.value)
        if folder is None or not folder.is_dir():
            owner = getattr(entry.dist, "name", "an installed package")
            raise ConfigError(f"the {ENTRY_POINTS} entry point {entry.name} = {entry.value!r} of {owner} is not a "
                              "package folder of config groups (a dotted package path, e.g. mypackage.conf); "
                              f"reinstall or uninstall {owner}")
        dirs.append(folder)
    return tuple(dirs)


def package_folder(dotted: str) -> Path | None:
    """The folder of a package path (`a.b.c` -> <a's folder>/b/c), located without importing it."""
    import importlib.util

    top, *rest = dotted.split(":")[0].strip().split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*rest)


def forget_adopted() -> None:
    """Every registry without its adopted plugins (test suites: tests/config/test_plugins.py)."""
    for group in KINDS:
        registry_of(group).forget_adopted()


def registry_of(group: str):
    if group == "algorithm":
        from fedbench.algorithms import load_all

        return load_all()
    if group == "model":
        from fedbench.models import MODELS

        return MODELS
    from fedbench.data import DATASETS, PARTITIONS

    return {"dataset": DATASETS, "partition": PARTITIONS}[group]


def adopt_targets(cfg: Mapping[str, Any]) -> None:
    """Adopt the object of every group of a config (DictConfig or resolved dict) whose yaml names one by
    `_target_`; a target that does not import, or is not what its group needs, is one ConfigError."""
    for group in KINDS:
        entry = cfg.get(group)
        target = entry.get(TARGET) if isinstance(entry, Mapping) else None
        if target is not None:
            adopt(group, entry.get("name"), target)


def adopt(group: str, name: Any, target: Any) -> None:
    if not isinstance(target, str) or not target.strip():
        raise ConfigError(f"{group}.{TARGET} must be an import path such as mypackage.module.Name, got {target!r}")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{group}.{TARGET}={target} needs a {group}.name beside it (the name runs are recorded by)")
    obj = locate(group, target)
    if group == "algorithm":
        from fedbench.algorithms.base import Algorithm

        if not (isinstance(obj, type) and issubclass(obj, Algorithm)):
            raise ConfigError(f"{group}.{TARGET}={target} is {describe(obj)}, not {KINDS[group]}")
        check_interface(obj, target)
    elif not callable(obj):
        raise ConfigError(f"{group}.{TARGET}={target} is {describe(obj)}, not {KINDS[group]}")
    registry_of(group).adopt(name, obj, target)


def locate(group: str, target: str):
    """The object at an import path (Hydra's get_object), the current folder on sys.path; its import
    error in one line. What the module prints as it is imported goes to stderr: fedbench's stdout (the config of
    --cfg job, a report's table) stays what the command prints."""
    import contextlib
    import logging

    from hydra.utils import get_object

    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.append(here)  # after the installed packages: a folder's file never shadows one of them
    quiet = logging.getLogger("hydra.utils")  # it logs the failure too: the ConfigError below is the one line
    level, quiet.level = quiet.level, logging.CRITICAL
    before = torch_globals()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what a module prints as it is imported: not into --cfg's yaml
            obj = get_object(target)
        check_torch_globals(group, target, before)
        return obj
    except ConfigError:
        raise
    except Exception as exc:
        cause = exc.__cause__ or exc
        why = missing(target) if isinstance(cause, (ImportError, AttributeError)) else ""
        why = why or f"{type(cause).__name__}: {' '.join(str(cause).split())}"
        raise ConfigError(f"{group}.{TARGET}={target} does not import: {why} (a module is looked up in the current "
                          "folder, on PYTHONPATH and among the installed packages)") from None
    finally:
        quiet.level = level


def torch_globals() -> tuple:
    """torch's process-wide settings a run depends on: the default dtype (torch's float32 before torch is imported)
    and whether gradients are on."""
    if "torch" not in sys.modules:
        return ("torch.float32", True)
    import torch

    return (str(torch.get_default_dtype()), torch.is_grad_enabled())


def check_torch_globals(group: str, target: str, before: tuple) -> None:
    """A plugin module that sets torch's default dtype or turns gradients off as it is imported changes the
    numbers of every run of the process (the model's initial values; engine.dtype is the run's precision): the
    setting is put back and the import refused in one line naming the module's file."""
    after = torch_globals()
    if after == before:
        return
    import torch

    torch.set_default_dtype(getattr(torch, before[0].removeprefix("torch.")))
    torch.set_grad_enabled(before[1])
    name = target.rsplit(".", 1)[0]  # the module the import path names (a class of a nested one: its parent)
    while "." in name and name not in sys.modules:
        name = name.rsplit(".", 1)[0]
    module = sys.modules.get(name)
    where = f"{name} ({getattr(module, '__file__', None) or '?'})"
    what = (f"torch's default dtype from {before[0]} to {after[0]} (torch.set_default_dtype)" if after[0] != before[0]
            else "torch's gradient mode to off (torch.set_grad_enabled)")
    raise ConfigError(f"{group}.{TARGET}={target}: importing {where} changed {what}, which would change every run "
                      "of this process; leave torch's global settings alone (engine.dtype sets a run's precision)")


def missing(target: str) -> str:
    """What of an import path is missing: its module, or a name in the module found."""
    import importlib
    import importlib.util

    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:i])
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            try:
                importlib.import_module(module)
            except Exception as exc:  # the user's module fails on import (a dependency it lacks)
                return f"importing {module} raises {type(exc).__name__}: {' '.join(str(exc).split())}"
            return f"module {module} has no {'.'.join(parts[i:])}"
    return f"no module named {parts[0]}"


def describe(obj: Any) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    return f"a {type(obj).__name__}"


# the methods the engine calls on an algorithm, with the arguments it passes (fedbench/algorithms/base.py)
CALLS = {
    "setup": ("setting",), "validate": (), "validate_schedule": ("local_steps", "local_epochs"), "init": ("x0",),
    "client_states": (), "broadcast": ("server", "round_"), "client_update": ("down", "client", "work"),
    "aggregate": ("server", "up", "cohort"), "model": ("server",), "metrics": ("server",), "work_of": ("work",),
    "chains_clients": (), "prepare": ("down", "client", "work"),
    "rebroadcast": ("server", "down", "prepared", "cohort"),
    "relay": ("down", "up"),
}


def check_interface(cls: type, target: str) -> None:
    """A plugin's Algorithm defines what a round calls (client_update and aggregate; prepare and rebroadcast when
    two_phase; relay when it chains its clients), each taking the arguments the engine passes: one ConfigError
    naming the class, its file and the method, before any work (not a NotImplementedError or TypeError inside a
    round)."""
    import inspect

    from fedbench.algorithms.base import Algorithm

    where = f"{qualified_name(cls)} ({source_line(cls) or cls.__module__})"
    needed = ["client_update", "aggregate"] + (["prepare", "rebroadcast"] if cls.two_phase else [])
    if getattr(cls, "chains_clients") is not Algorithm.chains_clients:
        needed.append("relay")
    lacking = [name for name in needed if getattr(cls, name) is getattr(Algorithm, name)]
    if lacking:
        raise ConfigError(f"algorithm._target_={target}: {where} does not define {', '.join(lacking)}; an Algorithm "
                          "defines client_update(down, client, work) and aggregate(server, up, cohort) "
                          "(fedbench/algorithms/base.py)")
    for name, args in CALLS.items():
        method = getattr(cls, name)
        if method is getattr(Algorithm, name) or not callable(method):
            continue
        try:
            signature = inspect.signature(method)
        except (TypeError, ValueError):  # a builtin or C callable: nothing to read
            continue
        bound = isinstance(inspect.getattr_static(cls, name), (classmethod, staticmethod))
        try:
            signature.bind(*([] if bound else [None]), *args)
        except TypeError:
            shown = str(signature) if bound else str(signature).replace("(self, ", "(", 1)
            raise ConfigError(f"algorithm._target_={target}: {where} defines {name}{shown}, but fedbench calls "
                              f"{name}({', '.join(args)}) (fedbench/algorithms/base.py)") from None


