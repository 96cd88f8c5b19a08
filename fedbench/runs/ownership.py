"""Who may write a run folder, and what a run may remove from it.

One live writer per folder: a run (or a sweep) takes `.fedbench.lock` in its folder with
fcntl.flock on an open descriptor before it writes anything there. The kernel drops the lock when
its process ends however it ends (exit, Ctrl-C, SIGKILL), so a lock left by a dead process is
stale by construction and the next claim simply takes it over; a live owner's pid, host and start
time are in the file, and a second writer is refused in one line naming them. Claims are counted
per process (a folder claimed by the CLI before Hydra writes its files is claimed again by the run
it then trains) and released with the last holder.

A claim also records what the folder held before this process touched it (and which parent folders
it created), so that a run refused before its first round removes exactly what it made: never a
file that was there before, never a folder that existed before."""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedbench.core.errors import FedbenchError

LOCK_NAME = ".fedbench.lock"
CHECKPOINT_NAME = "checkpoint.pt"  # what `fedbench resume` continues from (engine.checkpoint writes it)


class FolderBusy(FedbenchError):
    """The run folder is owned by another live process (exit code 2, before any work)."""

    exit_code = 2


class FolderTaken(FedbenchError):
    """A new run into a folder that holds another run's checkpoint (exit code 2, before any work)."""

    exit_code = 2


@dataclass
class Claim:
    folder: Path
    fd: int
    before: frozenset[str] | None  # the folder's entries before this process touched it; None: it made it
    made: list[Path] = field(default_factory=list)  # folders this process created, deepest first
    holders: int = 1


_HELD: dict[Path, Claim] = {}


def _key(folder: Path) -> Path:
    return Path(os.path.abspath(folder))


def _make(folder: Path) -> list[Path]:
    """mkdir -p, returning the folders it created (deepest first)."""
    missing = []
    probe = folder
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:  # a concurrent process made it: not ours to remove
            missing.remove(path)
    return missing


def owner_of(folder: Path) -> str | None:
    """'process 123 on host since 2026-...' when a live process owns `folder`, else None."""
    path = _key(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _describe(path)
    finally:
        os.close(fd)
    return None


def busy(folder: Path, what: str, owner: str) -> FolderBusy:
    return FolderBusy(f"the {what} {folder} is in use by {owner}; wait for it to end or stop it "
                      "(one live writer per run folder)")


def check_free(folder: Path, what: str = "run directory", resume: bool = True) -> None:
    """Name the folder's live owner (or, for a new run, the checkpoint it would overwrite) before any work;
    the atomic claim is taken when the run starts."""
    owner = owner_of(folder)
    if owner is not None:
        raise busy(folder, what, owner)
    if not resume:
        refuse_overwrite(folder)


def _describe(lock: Path) -> str:
    try:
        fields = dict(line.split("=", 1) for line in lock.read_text().splitlines() if "=" in line)
    except OSError:
        fields = {}
    return (f"fedbench process {fields.get('pid', '?')} on {fields.get('host', '?')} "
            f"(since {fields.get('started', '?')})")


def claim(folder: Path, what: str = "run directory") -> Claim:
    """Own `folder` (creating it), or raise FolderBusy naming its live owner."""
    key = _key(folder)
    held = _HELD.get(key)
    if held is not None:
        held.holders += 1
        return held
    try:
        before = frozenset(p.name for p in key.iterdir()) if key.is_dir() else None
        made = _make(key)
        while True:
            path = key / LOCK_NAME
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise busy(folder, what, _describe(path)) from None
            try:  # the owner we waited for may have removed the file it held: lock the one now there
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        os.write(fd, f"pid={os.getpid()}\nhost={socket.gethostname()}\nstarted={started}\n"
                     f"command={' '.join(sys.argv)[:500]}\n".encode())
    except OSError as exc:
        raise FedbenchError(f"cannot write to the {what} {folder}: {exc.strerror or exc}") from None
    held = _HELD[key] = Claim(key, fd, before, made)
    return held


def release(folder: Path) -> None:
    """Drop one hold on `folder`; the last removes the lock file and unlocks it."""
    key = _key(folder)
    held = _HELD.get(key)
    if held is None:
        return
    held.holders -= 1
    if held.holders > 0:
        return
    del _HELD[key]
    try:
        os.unlink(key / LOCK_NAME)  # while still locked: a waiting claim re-checks the file it locked
    except OSError:
        pass
    os.close(held.fd)


def holds(folder: Path) -> bool:
    return _key(folder) in _HELD


def discard_made(folder: Path) -> None:
    """Remove what this process added to its claimed `folder`, and the folders it created, once empty:
    entries that were there before it touched the folder stay, whatever they are. Releases the claim."""
    import shutil

    key = _key(folder)
    held = _HELD.get(key)
    if held is None:
        return
    for entry in key.iterdir():
        if entry.name == LOCK_NAME or (held.before is not None and entry.name in held.before):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)  # made inside this run's claim: this process's own
        else:
            entry.unlink(missing_ok=True)
    made = held.made
    held.holders = 1
    release(key)
    for path in made:  # deepest first; one another process wrote into meanwhile stays
        try:
            path.rmdir()
        except OSError:
            break


def refuse_overwrite(folder: Path) -> None:
    """A new run into a folder that holds a run's checkpoint would overwrite what resume continues from."""
    checkpoint = Path(folder) / CHECKPOINT_NAME
    if checkpoint.is_file():
        raise FolderTaken(f"{folder} holds the checkpoint of an earlier run ({checkpoint}); continue it with: "
                          f"fedbench resume {shell_path(folder)}, or give the new run a folder of its own "
                          "(hydra.run.dir)")


def shell_path(path: Path | str) -> str:
    """A path as it must be typed in a shell command line."""
    import shlex

    return shlex.quote(str(path))
