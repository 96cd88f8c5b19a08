"""User-facing errors. Each maps to one clear line on the command line and an exit code."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class FedbenchError(Exception):
    """Base class of errors that are the user's to fix; the CLI prints the message alone."""

    exit_code = 1
    before_work = False  # raised before a run's first round: a refused run leaves nothing it made (runs.hydra_app)


class ConfigError(FedbenchError):
    """A bad configuration value, found before any work starts (exit code 2)."""

    exit_code = 2
    before_work = True


class DataUnavailableError(FedbenchError):
    """A data set that is not on disk and cannot be downloaded (exit code 2)."""

    exit_code = 2
    before_work = True


class DivergenceError(FedbenchError):
    """Non-finite loss or parameters during training (exit code 3)."""

    exit_code = 3

    def __init__(self, round_: int, reason: str):
        super().__init__(f"run diverged at round {round_}: {reason}")
        self.round = round_
        self.reason = reason

    def __reduce__(self):  # unpickled as raised (a run in a worker process: runs.parallel)
        return type(self), (self.round, self.reason)


def unknown_choice(kind: str, value: object, choices: Iterable[str]) -> ConfigError:
    """'Unknown algorithm 'scafold'. Available: ... Did you mean 'scaffold'?'"""
    choices = sorted(choices)
    return ConfigError(f"Unknown {kind} {value!r}. Available: {', '.join(choices)}.{did_you_mean(value, choices)}")


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """' Did you mean 'scaffold'?' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(str(value), list(choices), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def check(condition: bool, message: str) -> None:
    """Raise a ConfigError with `message` unless `condition` holds."""
    if not condition:
        raise ConfigError(message)


def report_error(exc: FedbenchError) -> None:
    """A user's error as one line on stderr (with the traceback too under FEDBENCH_DEBUG=1). What it quotes of a
    user's file or store (a name, a value) acts on no terminal (core.terminal)."""
    import os
    import sys

    from fedbench.core.terminal import printable

    if os.environ.get("FEDBENCH_DEBUG"):
        import traceback

        traceback.print_exc()
    print(f"error: {printable(str(exc))}", file=sys.stderr)


def is_disk_full(exc: BaseException) -> bool:
    """A write that failed for want of space (or quota): errno's ENOSPC/EDQUOT, SQLite's 'disk is full'."""
    import errno

    return getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "disk is full" in str(exc)


def existing_parent(folder):
    """`folder`, or its nearest parent that exists (a run folder not made yet lives on its parent's disk)."""
    from pathlib import Path

    existing = Path(folder).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def free_bytes(folder) -> int | None:
    """The bytes left on the disk of `folder` (its nearest existing parent); None when the system cannot say."""
    import shutil

    try:
        return shutil.disk_usage(existing_parent(folder)).free
    except OSError:
        return None


def size_text(n: float) -> str:
    """A size in bytes as people write it: '12.0 MB', '830 bytes'."""
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def free_space(folder) -> str:
    """The space left on the disk of `folder` (its nearest existing parent), e.g. '12.0 MB free'."""
    free = free_bytes(folder)
    return "free space unknown" if free is None else f"{size_text(free)} free"


def write_failure(exc: BaseException, folder) -> str:
    """Why a write under `folder` failed, in a few words: a full disk names its free space."""
    if is_disk_full(exc):
        return f"no space left on the disk of {folder} ({free_space(folder)})"
    return f"cannot write to {folder}: {getattr(exc, 'strerror', None) or exc}"
