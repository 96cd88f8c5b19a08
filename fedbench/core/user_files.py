"""The user's files that fedbench reads by name (data sets, config folders): a name held by a FIFO, a device or a
folder is the user's error, said in one line. Counted as missing, it read as "not found" beside the entry, or as a
silent fall-back to the next folder; opened, a FIFO blocks the read forever."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fedbench.core.errors import FedbenchError


def user_file(path: Path, what: str, error: type[FedbenchError],
              fix: str = "put the file there (or a link to it), or remove it") -> bool:
    """Whether a regular file (or a link to one) stands at `path`; False where nothing does (a dangling link
    included); `error` naming the entry where something else does."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if stat.S_ISREG(mode):
        return True
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
    raise error(f"{path} is {kind}, not {what}: {fix}")
