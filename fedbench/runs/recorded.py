"""What a run folder records of how its run was started (`.hydra/overrides.yaml`, `.hydra/fedbench.yaml`),
tied to the run's checkpoint: each checkpoint stores a digest of that record, and `fedbench resume`
composes the record only when the digest matches. The folder's files are the user's to edit, and a
line appended there (`+hydra.callbacks.x._target_=builtins.open`) would run code at the resume."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from fedbench.core.errors import ConfigError
from fedbench.engine.checkpoint import RECORD_DIGEST

PLACEMENT = ("resume", "hydra.run.dir")  # where and how a run continues: set by resume, not part of the record


def key_of(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def digest(overrides: list[str], fedbench_conf: str | None, config_dirs: list[str]) -> str:
    """The digest of what composes the run: its overrides (without the placement) and config folders."""
    kept = [str(o) for o in overrides if key_of(str(o)) not in PLACEMENT]
    text = json.dumps({"overrides": kept, "fedbench_conf": fedbench_conf, "config_dirs": list(config_dirs)})
    return hashlib.sha256(text.encode()).hexdigest()


def read_yaml(path: Path):
    """A YAML file of the run folder, opened as the run's own (core.ownership.open_owned: no link, no FIFO)."""
    from omegaconf import OmegaConf

    from fedbench.core.ownership import open_owned
    from fedbench.config.compose import bound_yaml

    bound_yaml()  # composed within bounds: an alias bomb or a deep nesting there is one line, not minutes and gigabytes

    fd = open_owned(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        text = f.read(1 << 20).decode(errors="replace")
    try:
        return OmegaConf.to_container(OmegaConf.create(text))
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:200]
        raise ConfigError(f"{path} is not the run's YAML record ({exc.__class__.__name__}: {first})") from None


def read_overrides(path: Path) -> list[str]:
    overrides = read_yaml(path)
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(f"{path} is not a list of overrides, as a run records it")
    return overrides


def verify(run_dir: Path, checkpoint: Path, overrides: list[str], fedbench_conf: str | None,
           config_dirs: list[str]) -> None:
    """Refuse in one line a record that is not the one the checkpoint was written with. A checkpoint of an
    earlier version (no digest) continues only without hydra.* overrides, which would act before any check."""
    from fedbench.engine.checkpoint import read_payload

    saved = read_payload(checkpoint).get(RECORD_DIGEST)
    if saved is None:
        hydra = [o for o in overrides if key_of(o).startswith(("hydra.", "hydra/")) and key_of(o) not in PLACEMENT]
        if hydra:
            raise ConfigError(f"{run_dir}/.hydra/overrides.yaml sets {hydra[0]!r}, and its checkpoint {checkpoint} "
                              "predates the record's digest: resume does not compose Hydra settings it cannot tie "
                              "to the run; remove that line or start the run again")
        return
    if saved != digest(overrides, fedbench_conf, config_dirs):
        raise ConfigError(f"{run_dir}/.hydra/overrides.yaml (or fedbench.yaml) is not what the run recorded with its "
                          f"checkpoint {checkpoint}: it was changed since; resume composes only the run's own record: "
                          "restore it, or start a new run with the settings you want")
