"""Validation of a composed run config: every bad value stops the run before any work,
with one message that names the value and the valid choices."""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from fedbench.algorithms import load_all
from fedbench.algorithms.base import Algorithm
from fedbench.data import DATASETS, PARTITIONS
from fedbench.engine.gradients import EXECUTORS
from fedbench.core.errors import ConfigError, check, unknown_choice
from fedbench.models import MODELS

AGGREGATIONS = ("uniform", "num_samples")
LOSS_SCALES = ("mean", "sum")
OBJECTIVES = ("final_accuracy", "best_accuracy", "final_loss")


def params_of(group: DictConfig | dict) -> dict[str, Any]:
    """A group's parameters: its keys without `name`."""
    d = OmegaConf.to_container(group, resolve=True) if isinstance(group, DictConfig) else dict(group)
    d.pop("name", None)
    return d


def _check_kwargs(kind: str, name: str, fn, params: dict[str, Any], skip: int) -> None:
    signature = inspect.signature(fn)
    accepted = [p for p in list(signature.parameters)[skip:]]
    if any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
        return
    for key in params:
        if key not in accepted:
            raise ConfigError(
                f"Unknown parameter {kind}.{key} for {kind} {name!r}. Valid: {', '.join(accepted) or '(none)'}."
            )


def _positive_int(cfg: DictConfig, key: str, minimum: int = 1) -> None:
    value = OmegaConf.select(cfg, key)
    check(
        isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
        f"{key} must be an integer >= {minimum}, got {value!r}",
    )


def _positive_float(cfg: DictConfig, key: str) -> None:
    value = OmegaConf.select(cfg, key)
    check(
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0,
        f"{key} must be a finite number > 0, got {value!r}",
    )


MAX_SEED = 2**63 - 1  # the random streams hash the seed as a signed 64-bit integer


def _is_device(device: str) -> bool:
    import re

    return device in ("auto", "cpu", "mps") or re.fullmatch(r"cuda(:\d+)?", device) is not None


def build_algorithm(cfg: DictConfig):
    registry = load_all()
    name = cfg.algorithm.name
    cls = registry.get(name)
    params = params_of(cfg.algorithm)
    params.pop("imposes", None)  # the run settings the algorithm's config sets (documentation)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    for key in params:
        if key not in fields:
            raise ConfigError(
                f"Unknown parameter algorithm.{key} for algorithm {name!r}. Valid: {', '.join(sorted(fields)) or '(none)'}."
            )
    algorithm = cls(**params)
    algorithm.validate()
    return algorithm


def validate(cfg: DictConfig) -> Algorithm:
    """Check a composed config; raises ConfigError on the first problem. Returns the algorithm
    it built (not yet set up) so that a run does not build it twice."""
    for group in ("dataset", "partition", "model", "algorithm", "engine"):
        check(OmegaConf.select(cfg, group) is not None, f"config group {group!r} is missing")
    DATASETS.get(cfg.dataset.name)
    _check_kwargs("dataset", cfg.dataset.name, DATASETS.get(cfg.dataset.name), params_of(cfg.dataset), 0)
    partition = PARTITIONS.get(cfg.partition.name)
    _check_kwargs("partition", cfg.partition.name, partition, params_of(cfg.partition), 3)
    if cfg.partition.name == "dirichlet" or "alpha" in cfg.partition:
        alpha = cfg.partition.get("alpha", 0.5)
        check(isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and math.isfinite(alpha) and alpha > 0,
              f"partition.alpha must be a finite number > 0 (large alpha approaches an IID split; partition=iid is "
              f"the limit), got {alpha!r}")
    MODELS.get(cfg.model.name)
    _check_kwargs("model", cfg.model.name, MODELS.get(cfg.model.name), params_of(cfg.model), 2)

    for key in ("rounds", "num_clients", "clients_per_round"):
        _positive_int(cfg, key)
    check(
        cfg.clients_per_round <= cfg.num_clients,
        f"clients_per_round={cfg.clients_per_round} exceeds num_clients={cfg.num_clients}",
    )
    steps, epochs = cfg.get("local_steps"), cfg.get("local_epochs")
    imposed = list(OmegaConf.select(cfg, "algorithm.imposes", default=None) or [])
    hint = (f"; algorithm {cfg.algorithm.name} imposes local_steps={steps}: to run epochs, also set local_steps=null"
            if "local_steps" in imposed and steps is not None and epochs is not None else "")
    check(
        (steps is None) != (epochs is None),
        f"set exactly one of local_steps and local_epochs (got local_steps={steps}, local_epochs={epochs}){hint}",
    )
    _positive_int(cfg, "local_steps" if steps is not None else "local_epochs")
    _positive_int(cfg, "batch_size", minimum=0)
    _positive_int(cfg, "eval_every", minimum=0)
    _positive_int(cfg, "train_loss_every", minimum=0)
    _positive_int(cfg, "seed", minimum=0)
    check(cfg.seed <= MAX_SEED, f"seed must be an integer in [0, 2**63 - 1], got {cfg.seed}")
    for key in ("eta_l", "eta_g", "eta_l_decay"):
        _positive_float(cfg, key)
    targets = list(cfg.get("targets") or [])
    for t in targets:
        check(isinstance(t, (int, float)) and 0 < t <= 1, f"targets must lie in (0, 1], got {t!r}")
    objective = str(OmegaConf.select(cfg, "tracking.objective", default="final_accuracy"))
    if objective.startswith("rounds_to_"):
        check(any(f"rounds_to_{float(t):g}" == objective for t in targets),
              f"tracking.objective={objective} names a target not in targets={targets}")
    elif objective not in OBJECTIVES:
        raise unknown_choice("tracking.objective", objective, (*OBJECTIVES, "rounds_to_<t>"))
    _positive_int(cfg, "tracking.checkpoint_every", minimum=0)
    experiment = OmegaConf.select(cfg, "tracking.experiment")
    check(isinstance(experiment, str) and experiment.strip() != "",
          f"tracking.experiment must name an MLflow experiment, got {experiment!r}")
    if cfg.aggregation not in AGGREGATIONS:
        raise unknown_choice("aggregation", cfg.aggregation, AGGREGATIONS)
    if cfg.loss_scale not in LOSS_SCALES:
        raise unknown_choice("loss_scale", cfg.loss_scale, LOSS_SCALES)

    engine = cfg.engine
    if engine.executor not in (*EXECUTORS, "auto"):
        raise unknown_choice("engine.executor", engine.executor, (*EXECUTORS, "auto"))
    _positive_int(cfg, "engine.client_chunk", minimum=0)
    if engine.get("dtype", "float32") not in ("float32", "float64"):
        raise unknown_choice("engine.dtype", engine.dtype, ("float32", "float64"))
    device = str(engine.device)
    check(_is_device(device), f"engine.device must be auto, cpu, cuda[:k] or mps, got {device!r}")
    state_device = str(engine.get("client_state_device", "auto"))
    check(_is_device(state_device),
          f"engine.client_state_device must be auto (= engine.device), cpu, cuda[:k] or mps, got {state_device!r}")
    _positive_int(cfg, "engine.threads", minimum=0)
    if device.startswith("cuda"):
        import torch

        check(torch.cuda.is_available(), f"engine.device={device} but no CUDA device is available; use engine.device=auto")
    algorithm = build_algorithm(cfg)  # unknown hyperparameters, impossible values
    algorithm.validate_schedule(cfg.local_steps, cfg.local_epochs)
    return algorithm


def written_out(cfg: DictConfig) -> DictConfig:
    """The config with shorthands written out, so a run is recorded (params, config hash, skip-finished)
    the same however it was typed: `algorithm.server_opt=adam` becomes adam's mapping with its defaults."""
    from fedbench.algorithms import server_opt

    value = OmegaConf.select(cfg, "algorithm.server_opt")
    if not isinstance(value, str):
        return cfg
    if value not in server_opt.SERVER_OPTIMIZERS:
        raise unknown_choice("algorithm.server_opt", value, server_opt.SERVER_OPTIMIZERS)
    cfg = cfg.copy()
    with open_dict(cfg):
        written = server_opt.defaults(value)  # name first, then the keys as the variant files list them
        cfg.algorithm.server_opt = {"name": value, **dict(sorted((k, v) for k, v in written.items() if k != "name"))}
    return cfg
