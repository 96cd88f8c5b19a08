"""Validation of a composed run config: every bad value stops the run before any work, with one
message that names the value and what is valid. The values are checked by config.checker against
config.schema and the groups' factories; the checks across keys are here, in one place.

A config is validated once: validate() keeps the algorithm it built (its validate() hook derives
state) for the config it passed, and the build (runs.build, through checked_algorithm) takes it,
validating only a config that was not checked before in this process, e.g. one a script composed
without preflight, or a job that a launcher runs in another process."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from fedbench.algorithms import load_all
from fedbench.algorithms.base import Algorithm
from fedbench.config.checker import check_group, check_section, check_value
from fedbench.config.plugins import TARGET, adopt_targets
from fedbench.config.schema import GROUPS, PARAMETER_SPECS, RunConfig
from fedbench.core.errors import ConfigError, check
from fedbench.data import DATASETS, PARTITIONS
from fedbench.models import MODELS

_CHECKED: dict[str, Algorithm] = {}  # config fingerprint -> the algorithm validate() built, until a build takes it


def params_of(group: DictConfig | dict) -> dict[str, Any]:
    """A group's parameters: its keys without `name` (and a plugin's `_target_`)."""
    d = OmegaConf.to_container(group, resolve=True) if isinstance(group, DictConfig) else dict(group)
    d.pop("name", None)
    d.pop(TARGET, None)
    return d


def partition_of(cfg: DictConfig) -> tuple[int, dict[str, Any]]:
    """(the split's seed, the partitioner's parameters): partition.seed is the split's own seed,
    apart from the run's `seed` so that runs of several seeds share one split (the batched
    launcher's lanes); partition.seed=${seed} draws a split per seed."""
    params = params_of(cfg.partition)
    seed = params.pop("seed", None)
    return int(cfg.seed if seed is None else seed), params


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The run's config as plain values (Hydra's own settings left out)."""
    try:
        return {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                for k, v in cfg.items() if k != "hydra"}
    except OmegaConfBaseException as exc:  # e.g. rounds=${oops}
        raise ConfigError(f"cannot resolve the config: {' '.join(str(exc).split())}") from None


def fingerprint(cfg: DictConfig) -> str:
    """The config as written (interpolations unresolved, Hydra's settings left out, shorthands written
    out as the run records them): equal fingerprints are the same run config."""
    cfg = written_out(cfg)
    raw = {k: OmegaConf.to_container(v, resolve=False) if OmegaConf.is_config(v) else v
           for k, v in cfg.items_ex(resolve=False) if k != "hydra"}
    return json.dumps(raw, sort_keys=True, default=str)


def validate(cfg: DictConfig) -> None:
    """Check a composed config; raises ConfigError on the first problem."""
    _CHECKED[fingerprint(cfg)] = _checked(cfg)


def _checked(cfg: DictConfig) -> Algorithm:
    """The checks of validate(); returns the algorithm they built (not yet set up)."""
    DATASETS.names()  # the data sets register their resolvers on import (eta_l: ${logistic_inv_lmax:...})
    values = resolved(cfg)
    for group in GROUPS:
        check(isinstance(values.get(group), dict) and "name" in values[group],
              f"config group {group!r} is missing (or has no name)")
    adopt_targets(values)  # a user's own code, named by _target_: registered under its name before the lookups
    factories = {"dataset": DATASETS.get, "partition": PARTITIONS.get, "model": MODELS.get, "algorithm": load_all().get}
    for group, (skip, extra) in GROUPS.items():
        name = values[group]["name"]
        params = {k: v for k, v in values[group].items() if k not in extra}
        check_group(group, name, params, factories[group](name), skip, PARAMETER_SPECS)
    # the split's own seed is no parameter of a partitioner's (partition_of takes it out): checked here
    check_value("partition.seed", values["partition"].get("seed"), Optional[int], PARAMETER_SPECS["partition.seed"])
    check_section(values, RunConfig)
    check_across(values)
    extra = GROUPS["algorithm"][1]
    algorithm = load_all().get(values["algorithm"]["name"])(
        **{k: v for k, v in values["algorithm"].items() if k not in extra})
    algorithm.validate()  # the algorithm's own ranges and choices
    check_extras(values, type(algorithm))
    algorithm.validate_schedule(values["local_steps"], values["local_epochs"])
    return algorithm


def check_extras(values: dict[str, Any], algorithm_class) -> None:
    """A non-zero shared local-step extra (weight_decay, grad_clip, local_momentum) needs an
    algorithm whose local step takes it (Algorithm.local_extras)."""
    from fedbench.algorithms.base import EXTRAS

    name = values["algorithm"]["name"]
    for key in EXTRAS:
        if values[key] and key not in algorithm_class.local_extras:
            takers = sorted(n for n in load_all().describe() if key in load_all().get(n).local_extras)  # built-ins
            raise ConfigError(f"{key}={values[key]}: algorithm {name} has no local SGD step that takes it; set "
                              f"{key}=0, or use an algorithm that does: {', '.join(takers)}")


def check_across(values: dict[str, Any]) -> None:
    """The checks that involve more than one key, or the machine (a CUDA device)."""
    check(values["clients_per_round"] <= values["num_clients"],
          f"clients_per_round={values['clients_per_round']} exceeds num_clients={values['num_clients']}")
    steps, epochs = values["local_steps"], values["local_epochs"]
    imposed = list(values["algorithm"].get("imposes") or [])
    hint = (f"; algorithm {values['algorithm']['name']} imposes local_steps={steps}: to run epochs, also set "
            "local_steps=null" if "local_steps" in imposed and steps is not None and epochs is not None else "")
    check((steps is None) != (epochs is None),
          f"set exactly one of local_steps and local_epochs (got local_steps={steps}, local_epochs={epochs}){hint}")
    objective, targets = values["tracking"]["objective"], values["targets"]
    if objective.startswith("rounds_to_"):
        check(any(f"rounds_to_{float(t):g}" == objective for t in targets),
              f"tracking.objective={objective} names a target not in targets={targets}")
    check(not values["stop_at_targets"] or (targets and values["eval_every"]),
          f"stop_at_targets=true needs targets to reach and a test evaluation to see them (got targets={targets}, "
          f"eval_every={values['eval_every']})")
    # more torch threads than cores only slow it down, and 100000 exhaust the machine (a segfault); the
    # message names no number, so that it reads the same on every machine (docs/bad_inputs.md)
    check(values["engine"]["threads"] <= (os.cpu_count() or 1),
          f"engine.threads={values['engine']['threads']} is more than this machine's CPU cores (os.cpu_count()); "
          "use at most that many, or engine.threads=0 for torch's default")
    check_representable(values)
    for key in ("device", "client_state_device"):
        check_device_present(f"engine.{key}", values["engine"][key])
    check_not_file_store(values["tracking"].get("uri"))


def check_not_file_store(uri: str | None) -> None:
    """MLflow 3 refuses new runs in its file store (file:<folder>) unless MLFLOW_ALLOW_FILE_STORE says otherwise:
    the run failed at start with MLflow's paragraph, cut to one line before its way out."""
    if uri is None or not uri.startswith("file:"):
        return
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE  # the MLflows that refuse it, and its parsing
    except ImportError:
        return
    try:
        allowed = MLFLOW_ALLOW_FILE_STORE.get()
    except ValueError as exc:  # MLFLOW_ALLOW_FILE_STORE=yes: MLflow's own message names its values
        raise ConfigError(str(exc)) from None
    if not allowed:
        raise ConfigError(f"tracking.uri={uri!r} is MLflow's file store, which MLflow keeps in maintenance mode and refuses "
                          "for new runs; use a database store (tracking.uri=sqlite:///PATH/mlflow.db, or null for "
                          "outputs/mlflow.db), or set MLFLOW_ALLOW_FILE_STORE=true to use it anyway")


def check_device_present(key: str, device: str) -> None:
    """A CUDA or MPS device named for the run (its compute or its clients' state) is on this machine."""
    import torch

    if device.startswith("cuda"):
        check(torch.cuda.is_available(), f"{key}={device} but no CUDA device is available; use {key}=auto")
        index = int(device.partition(":")[2] or 0)
        count = torch.cuda.device_count()
        check(index < count, f"{key}={device} but this machine has {count} CUDA device(s) (cuda:0 .. cuda:{count - 1}); "
                             f"use {key}=auto")
    if device == "mps":
        check(torch.backends.mps.is_available(), f"{key}=mps but no MPS device is available; use {key}=auto")


def check_representable(values: dict[str, Any]) -> None:
    """A float32 run multiplies its tensors by its rates and the algorithm's coefficients as float32: a number
    beyond float32's range (eta_l=1e300) cannot be converted there, and would fail the run, and in a grid the
    lanes trained beside it, with a bare RuntimeError. A non-zero number below the dtype's smallest normal one
    (eta_l=1e-320, subnormal even in float64) computes as a subnormal or 0: a run that moves nothing, slowly.
    An algorithm's numbers, nested ones included (algorithm.server_opt.tau, algorithm.regularizer.lam,
    algorithm.rho_schedule's value), are its coefficients: an infinite one (algorithm.mu=inf) passed the
    algorithms' own `>= 0` checks and the run diverged at its first round (nan is refused by those checks)."""
    import torch

    dtype = values["engine"]["dtype"]
    info = torch.finfo(getattr(torch, dtype))
    coefficients = list(_numbers("algorithm", values["algorithm"]))
    for key, value in coefficients:
        check(not math.isinf(value), f"{key} must be a finite number, got {value}")
    numbers = [(k, v) for k, v in values.items() if isinstance(v, float)] + coefficients
    for key, value in numbers:
        check(not math.isfinite(value) or abs(value) <= info.max,
              f"{key}={value:g} is beyond {dtype}'s range (largest {info.max:.4g}), the run's engine.dtype; use a "
              "smaller value, or engine.dtype=float64")
        wider = dtype == "float32" and abs(value) >= torch.finfo(torch.float64).tiny
        check(not math.isfinite(value) or value == 0 or abs(value) >= info.tiny,
              f"{key}={value!r} is below {dtype}'s smallest normal number ({info.tiny:.4g}), the run's engine.dtype: "
              f"it computes as a subnormal or 0; use a larger value{', or engine.dtype=float64' if wider else ''}")


def _numbers(key: str, value: Any):
    """The floats in an algorithm's (nested) values, each with its key: algorithm.server_opt.tau, algorithm.rho_schedule[1]."""
    if isinstance(value, float):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(f"{key}.{k}", v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(f"{key}[{i}]", v)


def checked_algorithm(cfg: DictConfig) -> Algorithm:
    """The run's algorithm (not yet set up), validating the config first unless this process
    already did (preflight)."""
    algorithm = _CHECKED.pop(fingerprint(cfg), None)  # one atomic pop: jobs may share a process
    return algorithm if algorithm is not None else _checked(cfg)


def written_out(cfg: DictConfig) -> DictConfig:
    """The config with shorthands written out, so a run is recorded (params, config hash, skip-finished)
    the same however it was typed: `algorithm.server_opt=adam` becomes adam's mapping with its defaults."""
    from fedbench.algorithms import server_opt

    value = OmegaConf.select(cfg, "algorithm.server_opt")
    if not isinstance(value, str):
        return cfg
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.algorithm.server_opt = server_opt.full_mapping(value)
    return cfg
