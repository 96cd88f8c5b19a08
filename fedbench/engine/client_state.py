"""Per-client persistent state [N, ...], allocated lazily for clients that have participated.

LoSAC's tables are N x M x d floats (4 GB for MNIST defaults): rows live on `device` (CPU if the
accelerator is short of memory) and exist only for visited clients; a never-seen client reads
as its initial value. For populations of millions, DiskClientStateTable keeps them in a
memory-mapped file (engine.client_state_device=disk).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientStateSpec


class ClientStateTable:
    def __init__(self, spec: ClientStateSpec, device: torch.device, dtype: torch.dtype = torch.float32,
                 num_clients: int | None = None):
        self.spec = spec
        self.device = device
        self.dtype = dtype
        self.num_clients = num_clients  # the population's size, where known: a checkpoint's ids are checked against it
        self.rows: dict[int, Tensor] = {}

    def _initial(self, compute_device: torch.device) -> Tensor:
        init = self.spec.init
        if isinstance(init, Tensor):
            return init.to(compute_device, self.dtype).expand(self.spec.shape)
        return torch.full(self.spec.shape, float(init), dtype=self.dtype, device=compute_device)

    def gather(self, ids: list[int], compute_device: torch.device) -> Tensor:
        initial = None
        out = []
        for i in ids:
            row = self.rows.get(i)
            if row is None:
                initial = self._initial(compute_device) if initial is None else initial
                out.append(initial)
            else:
                out.append(row.to(compute_device, non_blocking=True))
        return torch.stack(out) if out else torch.empty(0, *self.spec.shape, device=compute_device)

    def scatter(self, ids: list[int], values: Tensor) -> None:
        for i, v in zip(ids, values):
            self.rows[i] = v.detach().to(self.device, copy=True)

    # checkpointing
    def state_dict(self) -> dict[str, Tensor | list[Tensor]]:
        """The visited clients' rows as a list, not stacked: stacking would copy the whole table (6.6 GB for
        CNN 1's y_i at 1,000 clients) at every checkpoint. Checkpoints with stacked values still load."""
        ids = sorted(self.rows)
        return {"ids": torch.tensor(ids, dtype=torch.int64), "values": [self.rows[i].cpu() for i in ids]}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.rows = {int(i): v.to(self.device) for i, v in zip(state["ids"], state["values"])}

    def after_checkpoint(self, round_: int) -> None:
        """A checkpoint holding this table's state_dict is on disk (the disk table writes its rows now)."""


DISK_FOLDER = "client_state"
SPILL_BYTES = 256 * 2**20  # rows changed since the last checkpoint held in memory before they go to the file


class DiskClientStateTable(ClientStateTable):
    """Per-client state of a large population in a memory-mapped file [N, *shape] (sparse: a row
    takes disk once written) with a `touched` byte per client; a round reads and writes its
    cohort's rows only.

    Bit-exact resume: rows changed since the last checkpoint stay in memory (`rows`); a checkpoint
    saves only them, in its own file, and then writes them into the table file, so that the table
    file holds the state of the last checkpoint (whose changed rows, applied again on resume, make
    it whole if the process died between the two writes). Changed rows beyond SPILL_BYTES go to the
    file between checkpoints; the side file then marks the table as ahead of its checkpoint and a
    resume from that checkpoint is refused rather than continued from a mixed state.

    The table belongs to one run and one checkpoint: its side file holds a token made when the run
    created the table and the round its file was last written at, and each checkpoint records them
    (with the shape and the files' sizes). A resume takes the files only when they are exactly that:
    the same token, at the checkpoint's round or at the round written before it (the process died
    between the checkpoint and the table's write: the checkpoint's rows make it whole), both files
    whole; an older copy put back, a truncated file, a damaged or missing side file are refused in
    one line before training.
    """

    def __init__(self, spec: ClientStateSpec, num_clients: int, dtype: torch.dtype, folder: Path, name: str):
        from fedbench.core.ownership import record_made

        super().__init__(spec, torch.device("cpu"), dtype, num_clients)
        existed = folder.is_dir()
        folder.mkdir(parents=True, exist_ok=True)
        if not existed:
            record_made(folder)  # a refused run removes it (core.ownership)
        self.path = folder / f"{name}.bin"
        self.meta = folder / f"{name}.json"
        self.touched_path = self.path.with_suffix(".touched")
        self.np_dtype = torch.empty((), dtype=dtype).numpy().dtype
        self.loaded = False  # a resume's checkpoint read: the files on disk are this run's
        self.file: np.memmap | None = None
        self.token: str | None = None  # this run's table (made with its files, or read back on resume)
        self.written_round: int | None = None  # the round the table file holds (-1: ahead of its checkpoint)
        self.expected: dict | None = None  # the identity the resumed checkpoint recorded
        self.rows_read = self.rows_written = 0  # rows moved between memory and the file (tests count them)

    @property
    def file_shape(self) -> list[int]:
        return [self.num_clients, *self.spec.shape]

    def _sizes(self) -> dict[str, int]:
        """The byte sizes of the table's files: the table [N, *shape], and one byte per client."""
        return {"bin": int(np.prod(self.file_shape)) * self.np_dtype.itemsize, "touched": self.num_clients}

    @staticmethod
    def _map(fd: int, dtype, shape: tuple) -> np.memmap:
        """A file of the table mapped read-only from the descriptor the run opened as its own."""
        with open(fd, "rb", closefd=False) as f:  # the mapping outlives the file object
            return np.memmap(f, dtype=dtype, mode="r", shape=shape)

    def _open(self, fresh: bool) -> None:
        """The table file: new and empty for a fresh run (a leftover of another run is replaced), or the
        one this run wrote (resume). The maps are read-only: rows are written with pwrite (`_flush`), so
        a disk that cannot take a row fails that write with ENOSPC (the run's one-line error, its
        checkpoint kept) instead of a SIGBUS from a store into a mapped page with no block behind it."""
        if self.file is not None:
            return
        if fresh:
            import secrets

            self.token = secrets.token_hex(16)
        from fedbench.core.ownership import open_owned, record_made

        self._fds = []
        for path, size in ((self.path, self._sizes()["bin"]), (self.touched_path, self._sizes()["touched"])):
            fd = open_owned(path, os.O_RDWR | (os.O_CREAT | os.O_TRUNC if fresh else 0))  # no link, no FIFO
            if fresh:
                record_made(path)
                os.ftruncate(fd, size)  # sparse: a row takes disk once written
            self._fds.append(fd)
        self.file = self._map(self._fds[0], self.np_dtype, tuple(self.file_shape))
        self.touched = self._map(self._fds[1], np.uint8, (self.num_clients,))
        if fresh:
            self._write_meta(0, ahead=False)

    def __del__(self):
        for fd in getattr(self, "_fds", ()):
            os.close(fd)

    def _write_rows(self, fd: int, path: Path, offset: int, data: bytes) -> None:
        """All of `data` at `offset`; a failed write (ENOSPC, EDQUOT, EIO) is an OSError naming the file."""
        view = memoryview(data)
        while view:
            try:
                written = os.pwrite(fd, view, offset)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
            view, offset = view[written:], offset + written

    def _write_meta(self, round_: int, ahead: bool) -> None:
        tmp = self.meta.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"round": round_, "ahead": ahead, "shape": self.file_shape, "token": self.token}))
        os.replace(tmp, self.meta)
        self.written_round = round_

    def identity(self) -> dict:
        """What a checkpoint records of the table it goes with."""
        return {"token": self.token, "written_round": self.written_round, "shape": self.file_shape,
                "sizes": self._sizes()}

    def gather(self, ids: list[int], compute_device: torch.device) -> Tensor:
        self._open(fresh=not self.loaded)
        on_file = [i for i in ids if i not in self.rows and self.touched[i]]
        read = dict(zip(on_file, torch.from_numpy(np.asarray(self.file[np.asarray(on_file, dtype=np.int64)])))) \
            if on_file else {}
        self.rows_read += len(on_file)
        initial = None
        out = []
        for i in ids:
            row = self.rows.get(i, read.get(i))
            if row is None:
                initial = self._initial(compute_device) if initial is None else initial
                out.append(initial)
            else:
                out.append(row.to(compute_device))
        return torch.stack(out) if out else torch.empty(0, *self.spec.shape, device=compute_device)

    def scatter(self, ids: list[int], values: Tensor) -> None:
        self._open(fresh=not self.loaded)
        super().scatter(ids, values)
        if len(self.rows) * self.file[0].nbytes > SPILL_BYTES:
            self._write_meta(-1, ahead=True)  # before the rows: a crash leaves the mark
            self._flush()

    def _flush(self) -> None:
        if not self.rows:
            return
        ids = np.asarray(sorted(self.rows), dtype=np.int64)
        values = torch.stack([self.rows[i] for i in ids.tolist()]).numpy().astype(self.np_dtype, copy=False)
        row_bytes = values[0].nbytes
        for i, row in zip(ids.tolist(), values):
            self._write_rows(self._fds[0], self.path, i * row_bytes, row.tobytes())
        for i in ids.tolist():
            self._write_rows(self._fds[1], self.touched_path, i, b"\x01")
        for fd, path in zip(self._fds, (self.path, self.touched_path)):
            try:
                os.fsync(fd)  # a file system that allocates late (NFS, thin volumes) reports it here
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
        self.rows_written += len(ids)
        self.rows = {}

    def state_dict(self) -> dict:
        """The rows changed since the last checkpoint only (the file holds the rest), and the table's identity."""
        self._open(fresh=not self.loaded)
        return {**super().state_dict(), "disk": str(self.path), "identity": self.identity()}

    def after_checkpoint(self, round_: int) -> None:
        self._open(fresh=not self.loaded)
        self._flush()
        self._write_meta(round_, ahead=False)

    def load_state_dict(self, state: dict) -> None:
        if "disk" not in state:
            raise ConfigError(f"the checkpoint holds client state in memory; {self.path} was asked for "
                              "(engine.client_state_device=disk): resume with the setting the run began with")
        meta = self._read_meta()
        self._check_files()
        if meta["ahead"]:
            raise ConfigError(f"{self.path} holds client rows written after the last checkpoint (more than "
                              f"{SPILL_BYTES >> 20} MiB changed between checkpoints); the run cannot resume bit for "
                              "bit: lower tracking.checkpoint_every, and start it again")
        self.expected = state.get("identity")  # None: a checkpoint of an earlier version (checked by round only)
        self.token = meta.get("token")
        self.rows = {int(i): v.to(self.dtype) for i, v in zip(state["ids"], state["values"])}
        self.loaded = True
        self._open(fresh=False)

    def after_load(self, round_: int) -> None:
        """Check the files against the checkpoint of `round_`, then write its changed rows into the file
        again (idempotent), as after that checkpoint."""
        meta = self._read_meta()
        if meta["round"] > round_:
            raise self._refuse(f"its file holds round {meta['round']}, later than the checkpoint's round {round_}")
        if self.expected is not None:
            if meta.get("token") != self.expected.get("token"):
                raise self._refuse(f"{self.meta.name} is another run's table")
            if meta["round"] not in (round_, self.expected.get("written_round")):
                raise self._refuse(f"its file holds round {meta['round']}; the checkpoint of round {round_} goes with "
                                   f"the table of round {self.expected.get('written_round')} or {round_}")
            if self.expected.get("sizes") != self._sizes() or self.expected.get("shape") != self.file_shape:
                raise self._refuse("the checkpoint recorded another shape")
        self.after_checkpoint(round_)

    def _refuse(self, what: str) -> ConfigError:
        return ConfigError(f"{self.path.parent} is not the client state of this run's checkpoint ({what}); the run "
                           "cannot resume from it: put the run's own client_state/ back, or start the run again")

    def _read_meta(self) -> dict:
        from fedbench.core.ownership import open_owned

        try:
            fd = open_owned(self.meta, os.O_RDONLY)
        except FileNotFoundError:
            raise self._refuse(f"{self.meta.name} is missing") from None
        with os.fdopen(fd, "rb") as f:
            text = f.read(1 << 16)
        try:
            meta = json.loads(text)
        except (ValueError, RecursionError) as exc:  # a nesting deeper than json's recursion limit is damage too
            raise self._refuse(f"{self.meta.name} is not JSON: {exc}") from None
        kinds = {"round": int, "ahead": bool, "shape": list}
        if not isinstance(meta, dict) or any(not isinstance(meta.get(k), t) for k, t in kinds.items()):
            raise self._refuse(f"{self.meta.name} lacks its round, ahead and shape")
        if meta["shape"] != self.file_shape:
            raise self._refuse(f"its rows are {meta['shape']}, this run's {self.file_shape}")
        return meta

    def _check_files(self) -> None:
        """Both files there and whole: numpy would extend a short file with zeros, and the run train from them."""
        for path, size in ((self.path, self._sizes()["bin"]), (self.touched_path, self._sizes()["touched"])):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                raise self._refuse(f"{path.name} is missing") from None
            if st.st_size != size:
                raise self._refuse(f"{path.name} holds {st.st_size:,} bytes, the table's are {size:,}")
