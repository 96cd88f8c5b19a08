"""Reader for the IDX format of (Fashion-)MNIST and EMNIST (LeCun et al.), plain or gzipped."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedbench.core.errors import DataUnavailableError

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> Tensor:
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip magic, whatever the file is called
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataUnavailableError(f"{path} is a corrupt or truncated gzip file: {exc}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DataUnavailableError(f"{path} is not an IDX file (bad magic number)")
    dtype, ndim = np.dtype(_DTYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise DataUnavailableError(
            f"{path} is truncated or corrupt: header says {shape} ({expected} bytes of data), "
            f"file has {len(raw) - header}"
        )
    array = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return torch.from_numpy(array.astype(dtype.newbyteorder("=")).copy())
