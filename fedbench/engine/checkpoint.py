"""Checkpoints: everything needed to continue a run, written atomically, loaded safely.

Random streams are counter-based (engine.streams), so no generator state needs saving: the
round index alone fixes every later cohort and minibatch.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from fedbench.engine.loop import RunState
from fedbench.core.errors import FedbenchError


TMP_PREFIX = ".ckpt-"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_orphans(folder: Path) -> None:
    """Temporary files of checkpoint writes that were killed (SIGKILL, power loss) half-way."""
    for orphan in folder.glob(f"{TMP_PREFIX}*.tmp"):
        orphan.unlink(missing_ok=True)


def save_checkpoint(path: Path, state: RunState, run_id: str | None, config_hash: str) -> None:
    payload = {
        "round": state.round,
        "server": {k: v.cpu() for k, v in state.server.items()},
        "tables": {name: table.state_dict() for name, table in state.tables.items()},
        "history": state.history,
        "floats_up": state.floats_up,
        "floats_down": state.floats_down,
        "wall_time": state.wall_time,
        "eval_time": state.eval_time,
        "run_id": run_id or "",
        "config_hash": config_hash,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path.parent)
    _write_atomically(path, payload)
    for table in state.tables.values():  # only now: a disk table's file may hold what the checkpoint does
        table.after_checkpoint(state.round)


def _write_atomically(path: Path, payload: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TMP_PREFIX, suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide the checkpoint from the user's group
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: a reader sees the old or the new checkpoint, never half
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, state: RunState, device: torch.device) -> dict:
    """Fill `state` from the checkpoint at `path`; returns the payload's metadata."""
    remove_orphans(path.parent)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated or foreign file
        raise FedbenchError(f"{path} is not a readable checkpoint ({exc.__class__.__name__}: "
                            f"{str(exc).splitlines()[0][:200]}); delete it to start the run again") from None
    state.round = int(payload["round"])
    state.server = {k: v.to(device) for k, v in payload["server"].items()}
    for name, table in state.tables.items():
        table.load_state_dict(payload["tables"][name])
        if hasattr(table, "after_load"):
            table.after_load(int(payload["round"]))
    state.history = list(payload["history"])
    state.floats_up = float(payload["floats_up"])
    state.floats_down = float(payload["floats_down"])
    state.wall_time = float(payload["wall_time"])
    state.eval_time = float(payload.get("eval_time", 0.0))  # absent in checkpoints before it existed
    return {"run_id": payload["run_id"] or None, "config_hash": payload["config_hash"]}


def rehash_checkpoint(path: Path, old_hash: str, new_hash: str) -> bool:
    """Re-key a checkpoint written under a config that was since renamed (the same run under new
    names): its config hash becomes `new_hash` if it was `old_hash`. Returns whether it changed."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload["config_hash"] != old_hash:
        return False
    payload["config_hash"] = new_hash
    _write_atomically(path, payload)
    return True
