"""The user's files that fedbench reads by name (data sets, config folders): a name held by a FIFO, a device or a
folder is the user's error, said in one line. Counted as missing, it read as "not found" beside the entry, or as a
silent fall-back to the next folder; opened, a FIFO blocks the read forever."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fedbench.core.errors import ConfigError, FedbenchError


def entry_kind(mode: int) -> str | None:
    """What an entry of this mode (os.stat's or os.lstat's) is, when it is no regular file: None for one."""
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a folder"
    return None if stat.S_ISREG(mode) else "a device or socket"


def user_file(path: Path, what: str, error: type[FedbenchError],
              fix: str = "put the file there (or a link to it), or remove it") -> bool:
    """Whether a regular file (or a link to one) stands at `path`; False where nothing does (a dangling link
    included); `error` naming the entry where something else does."""
    try:
        kind = entry_kind(os.stat(path).st_mode)  # links followed: a link to a file is the file
    except OSError:
        return False
    if kind is None:
        return True
    raise error(f"{path} is {kind}, not {what}: {fix}")


def is_config_file(path: Path) -> bool:
    """Whether a config file stands at `path` (user_file): Hydra, `fedbench list` and the key suggestions read every
    *.yaml of a config folder, and blocked forever on a FIFO."""
    return user_file(path, "a config file", ConfigError)
