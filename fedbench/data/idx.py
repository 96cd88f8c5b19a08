"""Reader for the IDX format of (Fashion-)MNIST and EMNIST (LeCun et al.), plain or gzipped.

The header declares the data's type and shape; the reader reads exactly that many bytes and no more,
so a gzip that inflates beyond its header (a few MB to GBs) is refused while it streams, and a header
declaring more than the format's data sets ever hold is refused before anything is read."""

from __future__ import annotations

import gzip
import math
import struct
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedbench.data.validate import FormatError, reading

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
# The largest IDX file of these data sets: EMNIST byclass's training images, 697,932 x 28 x 28 bytes (0.55 GB).
MAX_DATA_BYTES = 2**30
MAX_ROWS = 1_000_000  # EMNIST byclass, the largest, has 697,932 training images
MAX_DIMS = 4  # labels have 1, images 3 (a colour image set would have 4)


def read_idx(path: str | Path, dims: int | None = None) -> Tensor:
    """The array of an IDX file; `dims` (1 for labels, 3 for images) is the number of dimensions its
    header must declare."""
    path = Path(path)
    with reading(path, "an IDX file"):
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"  # gzip magic, whatever the file is called
        with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as f:
            head = f.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _DTYPES:
                raise FormatError("bad magic number")
            dtype, ndim = np.dtype(_DTYPES[head[2]]), head[3]
            if not 1 <= ndim <= MAX_DIMS or dims is not None and ndim != dims:
                want = f"{dims}" if dims is not None else f"1..{MAX_DIMS}"
                raise FormatError(f"the header declares {ndim} dimensions; this file must have {want}")
            sizes = f.read(4 * ndim)
            if len(sizes) < 4 * ndim:
                raise FormatError("truncated header")
            shape = struct.unpack(f">{ndim}I", sizes)
            expected = math.prod(shape) * dtype.itemsize  # Python integers: no overflow
            if shape[0] == 0:  # a test set of none: the run trained and reported accuracy 0.0000 and loss 0.0000
                raise FormatError(f"the header declares {shape}: no rows; every IDX data set holds some")
            if shape[0] > MAX_ROWS or expected > MAX_DATA_BYTES:
                raise FormatError(f"the header declares {shape} ({expected:,} bytes of data), more than any IDX "
                                  f"data set holds ({MAX_ROWS:,} rows, {MAX_DATA_BYTES:,} bytes)")
            data = f.read(expected + 1)  # one byte more than declared tells a file that goes on
        if len(data) != expected:
            held = "more" if len(data) > expected else f"{len(data):,} bytes (truncated)"
            raise FormatError(f"the header says {shape} ({expected:,} bytes of data), the file holds {held}")
        array = np.frombuffer(data, dtype=dtype).reshape(shape)
        return torch.from_numpy(array.astype(dtype.newbyteorder("=")))
