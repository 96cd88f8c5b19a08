"""Who may write a run folder, and what a run may remove from it.

One live writer per folder: a run (or a sweep) takes `.fedbench.lock` in its folder with
fcntl.flock on an open descriptor before it writes anything there. The kernel drops the lock when
its process ends however it ends (exit, Ctrl-C, SIGKILL), so a lock left by a dead process is
stale by construction and the next claim simply takes it over; a live owner's pid, host and start
time are in the file, and a second writer is refused in one line naming them. Claims are counted
per process (a folder claimed by the CLI before Hydra writes its files is claimed again by the run
it then trains) and released with the last holder.

A claim also records which parent folders it created, and every entry this process creates in the
folder is recorded (with its inode) as it is created, so that a run refused before its first round
removes exactly what it made: never a file that was there before, never another writer's.

What a run writes in its folder (the lock, Hydra's `.hydra/` record and log, the checkpoint, the disk
client tables) is opened as what it must be: a regular file or folder of this user's, with one link,
never through a symlink, never blocking (a FIFO). Anything else there is refused in one line naming
it before Hydra writes anything (check_entries) and again where the file is opened (open_owned)."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedbench.core.errors import FedbenchError
from fedbench.core.user_files import entry_kind

LOCK_NAME = ".fedbench.lock"
CHECKPOINT_NAME = "checkpoint.pt"  # what `fedbench resume` continues from (engine.checkpoint writes it)


class FolderBusy(FedbenchError):
    """The run folder is owned by another live process (exit code 2, before any work)."""

    exit_code = 2


class FolderTaken(FedbenchError):
    """A new run into a folder that holds another run's checkpoint (exit code 2, before any work)."""

    exit_code = 2


class NotOurs(FedbenchError):
    """A path the run writes is a link, a FIFO, a folder, another user's or another folder's file
    (exit code 2, before any work)."""

    exit_code = 2


# What a run writes in its folder, besides its lock and checkpoint (runs.callbacks, runs.hydra_app)
FAILED_NAME = "FAILED"
JOB_NAME = "hydra_app"  # Hydra's job name (the task function's module): its log is <JOB_NAME>.log
HYDRA_SUBDIR = ".hydra"
HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml", "fedbench.yaml")
SWEEP_FILE = "multirun.yaml"  # Hydra's record of a sweep, in the sweep folder
CLIENT_STATE = "client_state"  # engine.client_state's disk tables


@dataclass
class Claim:
    folder: Path
    fd: int
    before: frozenset[str] | None  # the folder's entries (_listing) before this process touched it; None: it made it
    made: list[Path] = field(default_factory=list)  # folders this process created, deepest first
    holders: int = 1
    created: dict[Path, tuple[int, int]] = field(default_factory=dict)  # entries this process made: (dev, inode)


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


def describe_entry(st: os.stat_result, path: Path) -> str | None:
    """What makes an existing entry other than a regular file of this user's with one link (None: it is one)."""
    if stat.S_ISLNK(st.st_mode):
        return f"a symlink (to {os.readlink(path)})"
    if (kind := entry_kind(st.st_mode)) is not None:
        return kind
    if st.st_nlink != 1:
        return f"a file with {st.st_nlink} hard links (shared with another folder)"
    if st.st_uid != os.geteuid():
        return f"a file of another user (uid {st.st_uid})"
    return None


def not_ours(path: Path, what: str) -> NotOurs:
    return NotOurs(f"{path} is {what}, where the run writes a file of its own; fedbench neither follows nor "
                   "replaces it: remove it, or give the run a folder of its own (hydra.run.dir)")


def open_owned(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open of a file the run owns: never through a symlink, never blocking, and only a regular file
    of this user's with one link (NotOurs in one line otherwise)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            try:
                what = describe_entry(os.lstat(path), path) or exc.strerror
            except OSError:
                what = exc.strerror
            raise not_ours(path, what) from None
        raise
    what = describe_entry(os.fstat(fd), path)
    if what is not None:
        os.close(fd)
        raise not_ours(path, what)
    return fd


def check_entries(folder: Path, log_names: tuple[str, ...] = (JOB_NAME,)) -> None:
    """Every path a run writes in `folder` is absent or what it must be (a folder of this user's, not a
    link, for `.hydra/` and `client_state/`; a regular file of this user's with one link for the rest),
    checked before Hydra writes anything there; and the folder itself is no dangling symlink."""
    folder = Path(folder)
    probe = folder.absolute()
    while not probe.exists():  # the folders Hydra will create: none may be a dangling link
        if probe.is_symlink():
            raise NotOurs(f"{probe} is a symlink to {os.readlink(probe)}, which does not exist; the run folder "
                          f"{folder} cannot be created there: remove the link or set hydra.run.dir to another folder")
        probe = probe.parent
    if not folder.is_dir():
        return
    for sub in (HYDRA_SUBDIR, CLIENT_STATE):
        try:
            st = os.lstat(folder / sub)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise not_ours(folder / sub, "a folder of another user's" if stat.S_ISDIR(st.st_mode)
                           else describe_entry(st, folder / sub))
    files = [LOCK_NAME, CHECKPOINT_NAME, FAILED_NAME, SWEEP_FILE, *(f"{n}.log" for n in log_names),
             *(f"{HYDRA_SUBDIR}/{n}" for n in HYDRA_FILES)]
    if (folder / CLIENT_STATE).is_dir():
        files += [f"{CLIENT_STATE}/{p.name}" for p in (folder / CLIENT_STATE).iterdir()]
    for name in files:
        try:
            st = os.lstat(folder / name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        what = describe_entry(st, folder / name)
        if what is not None:
            raise not_ours(folder / name, what)


def owner_of(folder: Path) -> str | None:
    """'process 123 on host since 2026-...' when a live process owns `folder`, else None."""
    path = _key(folder) / LOCK_NAME
    try:
        fd = open_owned(path, os.O_RDONLY)
    except OSError:  # none there (or unreadable: the claim says why)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _describe(fd)
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


def _describe(fd: int) -> str:
    """The owner recorded in the lock file open at `fd` (read from the descriptor: never a path again)."""
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace")
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    except OSError:
        fields = {}
    return (f"fedbench process {fields.get('pid', '?')} on {fields.get('host', '?')} "
            f"(since {fields.get('started', '?')})")


def _listing(folder: Path) -> frozenset[str]:
    """The folder's entries, and those of the subfolders a run writes into, as relative paths."""
    names = {p.name for p in folder.iterdir()}
    for sub in (HYDRA_SUBDIR, CLIENT_STATE):
        if sub in names and (folder / sub).is_dir() and not (folder / sub).is_symlink():
            names.update(f"{sub}/{p.name}" for p in (folder / sub).iterdir())
    return frozenset(names)


def claim(folder: Path, what: str = "run directory") -> Claim:
    """Own `folder` (creating it), or raise FolderBusy naming its live owner."""
    key = _key(folder)
    held = _HELD.get(key)
    if held is not None:
        held.holders += 1
        return held
    try:
        before = _listing(key) if key.is_dir() else None
        made = _make(key)
        while True:
            path = key / LOCK_NAME
            fd = open_owned(path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _describe(fd)
                os.close(fd)
                raise busy(folder, what, owner) from None
            try:  # the owner we waited for may have removed the file it held: lock the one now there
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        # no command line: it may carry a tracking URI's password, and the file is readable by others
        os.write(fd, f"pid={os.getpid()}\nhost={socket.gethostname()}\nstarted={started}\n".encode())
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


def record_made(path: Path) -> None:
    """Note that this process just created `path` inside a folder it claimed (with its inode, so that a
    file another writer put in its place later is never taken for it). A path that was in the folder
    before the claim is never noted: it is not this process's to remove."""
    path = Path(os.path.abspath(path))
    for key, held in _HELD.items():
        if path.is_relative_to(key) and path != key:
            if held.before is not None and path.relative_to(key).as_posix() in held.before:
                return
            try:
                st = os.lstat(path)
            except OSError:
                return
            held.created.setdefault(path, (st.st_dev, st.st_ino))
            return


def discard_made(folder: Path) -> None:
    """Remove what this process created in its claimed `folder` (record_made), and the folders the claim
    created, once empty: anything else there stays, whoever made it. Releases the claim."""
    key = _key(folder)
    held = _HELD.get(key)
    if held is None:
        return
    for path in sorted(held.created, key=lambda p: len(p.parts), reverse=True):  # files before their folders
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) != held.created[path]:
                continue  # replaced by another writer since
            if stat.S_ISDIR(st.st_mode):
                path.rmdir()  # only once empty: another writer's file in it keeps it
            else:
                path.unlink()
        except OSError:
            continue
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
