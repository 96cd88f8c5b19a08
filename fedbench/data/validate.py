"""What a reader read, checked against its format before any work (issue 42 §4).

Every reader of a user's file runs its parsing and checks inside `reading(path, what)`: whatever
fails there (a parser's own exception, a nesting too deep for json, a number where text belongs, a
check below) ends as one DataUnavailableError naming the file, exit 2. The checks raise FormatError
with what is wrong; `reading` adds the file. `check_dataset` is the last line behind them: a data set
any reader (or generator) returns holds finite inputs and labels its task allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from fedbench.core.errors import DataUnavailableError, FedbenchError


class FormatError(ValueError):
    """What a file holds is not what its format allows (`reading` adds the file's name)."""


@contextmanager
def reading(path: Path | str, what: str) -> Iterator[None]:
    """Turn any failure inside into one line: '<path> is not <what>: <why>'. A FIFO, device or folder at `path`
    is refused first (data.locations.data_file): opened, a FIFO blocks the read forever. So is a file that cannot
    fit in memory (fits_in_memory): a 10 GB sparse file of LEAF JSON, HAR or ESR text was read whole."""
    from fedbench.data.locations import data_file

    if data_file(Path(path)):  # a list of files joined in one string names no entry: nothing to check
        fits_in_memory(Path(path), what)
    try:
        yield
    except FedbenchError:
        raise
    except Exception as exc:  # any parser's, any type's: a crafted file reaches them all
        why = " ".join(str(exc).split())[:300] or "unreadable"
        if isinstance(exc, MemoryError):
            why = f"reading it took more memory than this process may take ({Path(path).stat().st_size:,} bytes of file)"
        elif not isinstance(exc, FormatError):
            why = f"{exc.__class__.__name__}: {why}"
        raise DataUnavailableError(f"{path} is not {what}: {why}") from exc


def fits_in_memory(path: Path, what: str) -> None:
    """Refuse, unread, a file that its reader cannot hold: every reader here holds at least the file's bytes and the
    text or arrays made of them, twice its size, and the memory available (core.memory: the host's, ulimit -v, the
    cgroup's) is less (a sparse file costs nothing on disk)."""
    from fedbench.core.memory import available_memory

    size, free = path.stat().st_size, available_memory()
    if 2 * size > free:
        raise DataUnavailableError(f"{path} is not {what}: it holds {size:,} bytes, and reading it takes at least twice "
                                   f"that; {free:,} bytes of memory are available")


def numeric(values, what: str) -> np.ndarray:
    """`values` as a real numeric array (bool, text, objects and nested ragged lists refused)."""
    array = np.asarray(values)
    if array.dtype.kind not in "iuf":
        raise FormatError(f"{what} must be numbers, got {_kind(array)}")
    return array


def finite(values, what: str) -> np.ndarray:
    """A numeric array without NaN or infinity (a NaN pixel would start a run that diverges)."""
    array = numeric(values, what)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = np.flatnonzero(~np.isfinite(array.reshape(-1)))
        raise FormatError(f"{what} hold {len(bad)} non-finite value{'s' * (len(bad) > 1)} (the first, "
                          f"{array.reshape(-1)[bad[0]]}, at flat index {bad[0]})")
    return array


def labels(values, first: int, count: int, what: str = "labels", owner: str = "the format") -> np.ndarray:
    """1-D whole-number labels in first..first+count-1, as int64 (a float label is refused, never floored)."""
    array = finite(values, what)
    if array.ndim != 1:
        raise FormatError(f"{what} must be a flat list, got shape {list(array.shape)}")
    if array.dtype.kind == "f" and (array != np.round(array)).any():
        bad = array[array != np.round(array)][0]
        raise FormatError(f"{what} must be whole numbers, got {bad}")
    if len(array) and (array.min() < first or array.max() > first + count - 1):
        raise FormatError(f"{what} range over {array.min():g}..{array.max():g}; {owner} has the {count} classes "
                          f"{first}..{first + count - 1}")
    return array.astype(np.int64)


def shaped(array: np.ndarray, tail: tuple[int, ...], what: str) -> np.ndarray:
    """`array` of shape [n, *tail]."""
    if array.ndim != 1 + len(tail) or tuple(array.shape[1:]) != tuple(tail):
        want = "x".join(["n", *map(str, tail)])
        raise FormatError(f"{what} must have shape {want}, got {'x'.join(map(str, array.shape)) or 'a scalar'}")
    return array


def same_length(a, b, what_a: str, what_b: str) -> None:
    if len(a) != len(b):
        raise FormatError(f"{len(a)} {what_a} but {len(b)} {what_b}")


def string(value, what: str) -> str:
    if not isinstance(value, str):
        raise FormatError(f"{what} must be text, got {type(value).__name__} {_short(value)}")
    return value


def of_type(value, kind: type, what: str):
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise FormatError(f"{what} must be a {kind.__name__}, got {type(value).__name__} {_short(value)}")
    return value


def at_most(path: Path, limit: int, what: str) -> None:
    """Refuse, before reading it, a file larger than its format's largest real file."""
    size = Path(path).stat().st_size
    if size > limit:
        raise FormatError(f"it holds {size:,} bytes; {what} holds at most {limit:,}")


def check_dataset(data, where: str) -> None:
    """The last check behind the readers: finite inputs and targets, one label per row, labels the
    task allows (classes 0..K-1, binary 0/1). `where` names the data set and its folder."""
    try:
        for split in ("train", "test"):
            x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
            if len(x) != len(y):
                raise FormatError(f"{len(x)} {split} inputs but {len(y)} labels")
            if not _all_finite(x):
                raise FormatError(f"the {split} inputs hold non-finite values (NaN or infinity)")
            if not _all_finite(y):
                raise FormatError(f"the {split} targets hold non-finite values (NaN or infinity)")
            if len(y) and data.task == "classification":
                low, high = int(y.min()), int(y.max())
                if low < 0 or high >= data.num_classes:
                    raise FormatError(f"the {split} labels range over {low}..{high}; the model has "
                                      f"the {data.num_classes} classes 0..{data.num_classes - 1}")
            if len(y) and data.task == "binary" and not ((y == 0) | (y == 1)).all():
                raise FormatError(f"the {split} labels of a binary task must be 0 or 1")
    except FormatError as exc:
        raise DataUnavailableError(f"{where}: {exc}") from None


def _all_finite(t: torch.Tensor, block: int = 2**24) -> bool:
    """No NaN or infinity in `t`, checked in blocks (a whole-tensor mask would take a quarter of its size)."""
    if not t.is_floating_point():
        return True
    flat = t.reshape(-1)
    return all(bool(torch.isfinite(flat[i:i + block]).all()) for i in range(0, len(flat), block))


def _kind(array: np.ndarray) -> str:
    return {"U": "text", "S": "bytes", "O": "mixed or ragged values", "b": "true/false"}.get(array.dtype.kind, str(array.dtype))


def _short(value) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
