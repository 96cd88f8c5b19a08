"""Checkpoints: everything needed to continue a run, written atomically, loaded safely.

Random streams are counter-based (engine.streams), so no generator state needs saving: the
round index alone fixes every later cohort and minibatch.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import torch

from fedbench.engine.loop import RunState
from fedbench.core.errors import ConfigError
from fedbench.core.values import is_number


TMP_PREFIX = ".ckpt-"
ORPHAN_NAME = re.compile(re.escape(TMP_PREFIX) + r"[a-z0-9_]{8}\.tmp")  # tempfile.mkstemp's names
RECORD_DIGEST = "recorded_digest"  # the digest of the run folder's record of its start (runs.recorded)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_orphans(folder: Path) -> None:
    """Temporary files of checkpoint writes that were killed (SIGKILL, power loss) half-way: regular files named
    as mkstemp names them (a user's `.ckpt-notes.tmp`, or a folder of that name, is theirs)."""
    for orphan in folder.glob(f"{TMP_PREFIX}*.tmp"):
        if ORPHAN_NAME.fullmatch(orphan.name) and orphan.is_file() and not orphan.is_symlink():
            orphan.unlink(missing_ok=True)


def save_checkpoint(path: Path, state: RunState, run_id: str | None, config_hash: str,
                    recorded: str | None = None) -> None:
    """`recorded`: the digest of the run folder's record of how the run was started, which a resume
    composes only when it matches (runs.recorded)."""
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
    if recorded:
        payload[RECORD_DIGEST] = recorded
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path.parent)
    _write_atomically(path, payload)
    for table in state.tables.values():  # only now: a disk table's file may hold what the checkpoint does
        table.after_checkpoint(state.round)


class _Writes:
    """A file for torch.save that keeps the OSError of a failed write: torch reports it as its own
    error (a RuntimeError in some versions), and the errno (a full disk) is what the user needs."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.f.flush()


def _write_atomically(path: Path, payload: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TMP_PREFIX, suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide the checkpoint from the user's group
        with os.fdopen(fd, "wb") as f:
            writes = _Writes(f)
            try:
                torch.save(payload, writes)
            except Exception as exc:
                if writes.error is not None and writes.error is not exc:
                    raise writes.error from None
                raise
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: a reader sees the old or the new checkpoint, never half
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, state: RunState, device: torch.device, rounds: int | None = None) -> dict:
    """Fill `state` from the checkpoint at `path`; returns the payload's metadata. A file that is not
    a checkpoint of this run (empty, truncated, another layout, other shapes, a round beyond the run's
    `rounds`) is refused in one line before anything is changed, so that no run starts training from it."""
    remove_orphans(path.parent)
    payload = read_payload(path)
    check_payload(path, payload, state, rounds)
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


def read_payload(path: Path) -> dict:
    """The checkpoint's dict (tensors only unpickled: weights_only); one line for anything else."""
    check_stored(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # empty, truncated or foreign file
        first = (str(exc).splitlines() or [""])[0][:200]
        raise ConfigError(f"{path} is not a readable checkpoint ({exc.__class__.__name__}: {first}); "
                          "delete it to start the run again") from None
    if not isinstance(payload, dict):
        raise ConfigError(f"{path} is not a fedbench checkpoint (it holds a {type(payload).__name__}); "
                          "delete it to start the run again")
    return payload


def check_stored(path: Path) -> None:
    """torch.save stores its zip's entries as they are: a compressed entry (or one declaring more bytes than it
    holds) is not a checkpoint of fedbench's, and a 1 MB one inflated to 1.6 GB before any check (16 GB from 16 MB)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # not a zip: torch.load's own error says so
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED or entry.file_size != entry.compress_size:
            raise ConfigError(f"{path} is not a checkpoint as torch.save writes one (its entry {entry.filename!r} is "
                              f"compressed: {entry.compress_size:,} bytes declaring {entry.file_size:,}); delete it to "
                              "start the run again")


NUMBER = (int, float)
MAX_METRICS = 1000  # a history row's metrics: a round logs a dozen or so
FIELDS = {"round": int, "server": dict, "tables": dict, "history": list, "floats_up": NUMBER, "floats_down": NUMBER,
          "wall_time": NUMBER, "run_id": str, "config_hash": str}


def check_payload(path: Path, payload: dict, state: RunState, rounds: int | None = None) -> None:
    """The checkpoint's fields, their types, its round within the run's `rounds`, and every tensor's shape
    against the state this run built (its model, algorithm and client tables)."""

    def refuse(what: str):
        raise ConfigError(f"{path} does not match this run ({what}): it was written by another version or run; "
                          "delete it to start the run again")

    missing = sorted(set(FIELDS) - set(payload))
    if missing:
        refuse(f"missing {', '.join(missing)}")
    for key, kind in FIELDS.items():
        if not isinstance(payload[key], kind) or (kind is int and isinstance(payload[key], bool)):
            refuse(f"{key} is a {type(payload[key]).__name__}")
    if payload["round"] < 0:
        refuse(f"round {payload['round']}")
    if rounds is not None and payload["round"] > rounds:  # round 2**62 resumed as a run FINISHED with nothing trained
        refuse(f"round {payload['round']}, beyond the run's rounds={rounds}")
    _check_tensors(refuse, "server", payload["server"], state.server)
    if set(payload["tables"]) != set(state.tables):
        refuse(f"client tables {sorted(payload['tables'])}, expected {sorted(state.tables)}")
    for name, table in state.tables.items():
        saved = payload["tables"][name]
        if not isinstance(saved, dict) or not {"ids", "values"} <= set(saved):
            refuse(f"client table {name} has no ids and values")
        ids, values = saved["ids"], saved["values"]
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or len(values) != len(ids):
            refuse(f"client table {name}'s ids and values differ in length")
        # ids name clients: whole numbers, each once, of the population (a float was truncated, a duplicate's row
        # dropped, an id beyond it a traceback in a disk table, or a row the run never reads)
        if ids.dtype != torch.int64 or (len(ids) and (int(ids.min()) < 0 or len(ids.unique()) != len(ids) or (
                table.num_clients is not None and int(ids.max()) >= table.num_clients))):
            refuse(f"client table {name}'s ids are not distinct int64 client numbers"
                   + (f" of 0..{table.num_clients - 1}" if table.num_clients is not None else ""))
        shape = tuple(table.spec.shape)
        for v in values:
            if not isinstance(v, torch.Tensor) or tuple(v.shape) != shape:
                refuse(f"client table {name} holds rows of shape {_shape(v)}, this run's are {list(shape)}")
            if not _plain(v, table.dtype):
                refuse(f"client table {name} holds rows of {_kind(v)}, this run's are dense {table.dtype} tensors")
    if not all(isinstance(h, dict) for h in payload["history"]):
        refuse("history is not a list of rounds")
    if len(payload["history"]) > payload["round"] or any(len(h) > MAX_METRICS for h in payload["history"]):
        # one row a round, a few metrics each: a 0.9 MB file of one 20,000-key row referenced 200,000 times held the
        # resume for minutes
        refuse(f"history of {len(payload['history']):,} rounds of up to {max(map(len, payload['history'])):,} metrics, "
               f"more than its round {payload['round']} with at most {MAX_METRICS:,} metrics each")
    for row in payload["history"]:  # a row's text or tensor failed the run's record after its last round (exit 1)
        bad = next((k for k, v in row.items() if not isinstance(k, str) or not is_number(v)), None)
        if bad is not None or not isinstance(row.get("round"), int) or not 1 <= row["round"] <= payload["round"]:
            refuse(f"history holds a round {_short(row)}, not numbers of rounds 1..{payload['round']}")


def _check_tensors(refuse, where: str, saved: dict, built: dict[str, torch.Tensor]) -> None:
    """`saved` against the tensors this run built: the same keys, shapes and dtypes, dense."""
    if set(saved) != set(built):
        refuse(f"{where} state {sorted(saved)}, expected {sorted(built)}")
    for key, tensor in built.items():
        shape = tuple(tensor.shape)
        if not isinstance(saved[key], torch.Tensor) or not _fits(tuple(saved[key].shape), shape):
            refuse(f"{where} state {key} of shape {_shape(saved[key])}, this run's is {list(shape)}")
        if not _plain(saved[key], tensor.dtype):
            refuse(f"{where} state {key} is {_kind(saved[key])}, this run's is a dense {tensor.dtype} tensor")
        if saved[key].is_floating_point() and not bool(torch.isfinite(saved[key]).all()):
            # a run checkpoints finite rounds only: resumed, it ended FAILED as diverged (exit 3), its record changed
            refuse(f"{where} state {key} holds NaN or infinite values, which no round of a run checkpoints")


def _plain(t: torch.Tensor, dtype) -> bool:
    """A dense tensor in memory of the run's dtype (a sparse, meta or other-typed one failed deep in the round),
    each element of its own: a stride of 0 made a 5 kB checkpoint's [10^9, d] FedSSO memory, 5 TB at its next round."""
    return (t.dtype == dtype and t.layout == torch.strided and not t.is_meta and not t.is_quantized
            and _own_memory(t))


def _own_memory(t: torch.Tensor) -> bool:
    """No two elements share memory: the dimensions, ordered by stride, each step past the extent of the ones before."""
    extent = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1):
        if stride < extent:
            return False
        extent = stride * size
    return True


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(t: torch.Tensor) -> str:
    layout = "meta" if t.is_meta else "dense" if t.layout == torch.strided else str(t.layout).removeprefix("torch.")
    if layout == "dense" and not _own_memory(t):
        layout = f"dense (elements sharing memory: strides {list(t.stride())})"
    return f"a {layout} {t.dtype} tensor"


def _fits(saved: tuple, built: tuple) -> bool:
    """A saved shape is this run's, where a dimension empty at round 0 may have grown (a memory that fills
    over the rounds: FedSSO's quasi-Newton pairs qn_s [m, d] start at [0, d])."""
    return len(saved) == len(built) and all(b == 0 or s == b for s, b in zip(saved, built))


def _shape(value) -> str:
    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def rehash_checkpoint(path: Path, old_hash: str, new_hash: str, recorded: str | None = None) -> bool:
    """Re-key a checkpoint written under a config that was since renamed (the same run under new
    names): its config hash becomes `new_hash` if it was `old_hash`, and the digest of its record
    `recorded` (the record rewritten under the new names). Returns whether it changed."""
    payload = read_payload(path)
    if payload.get("config_hash") != old_hash:
        return False
    payload["config_hash"] = new_hash
    if recorded and RECORD_DIGEST in payload:
        payload[RECORD_DIGEST] = recorded
    _write_atomically(path, payload)
    return True
