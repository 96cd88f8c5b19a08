"""Reading files a user placed in data.root or fedbench downloaded: nothing in them may run.

Every such file is read here or by a parser that cannot run code (IDX, text, CSV, JSON, images,
svmlight). Three formats can: pickles (the CIFAR python batches), .npz archives (numpy unpickles
object arrays unless told not to) and tar archives (members may point outside the folder).
- `load_cifar_batch` unpickles with a closed list of the globals a CIFAR batch holds (numpy's
  array and dtype rebuilders); any other global is refused before it is looked up, so a crafted
  batch stops in one line and none of its code runs. BUILD sets the state of numpy arrays and dtypes
  only (never attributes of the admitted functions), and what a batch may hold is bounded by the
  format's sizes before any array is built: its file size, the opcodes run (each element built is
  pushed by one) and what its values expand to (memo-shared nested lists counted, not expanded).
- `load_npz` reads plain arrays only (allow_pickle=False) and turns a damaged file into one line.
- `fetch_archive` downloads (checking the md5 when the source publishes one) and extracts with
  Python's "data" filter (no absolute paths, no `..`, no links out, no devices). fedbench never
  constructs torchvision's dataset classes to download: CIFAR's class unpickles what it fetched.
"""

from __future__ import annotations

import codecs
import math
import pickle
import tarfile
import zipfile
from pathlib import Path

import numpy as np

from fedbench.core.errors import DataUnavailableError

# The rebuilders numpy's pickles name, found from numpy itself (their module moved in numpy 2:
# numpy.core -> numpy._core; the original CIFAR batches name the old one).
_RECONSTRUCT = np.zeros(1).__reduce__()[0]
_FROMBUFFER = np.zeros(1).__reduce_ex__(5)[0]
_SCALAR = np.int64(0).__reduce__()[0]


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """Python 3's protocol-2 pickles spell bytes as _codecs.encode(str, 'latin1'): that codec only."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


_CIFAR_GLOBALS = {
    **{(m, "_reconstruct"): _RECONSTRUCT for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "scalar"): _SCALAR for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "_frombuffer"): _FROMBUFFER for m in ("numpy.core.numeric", "numpy._core.numeric")},
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


# The format's real sizes: a CIFAR-100 `train` file, the largest, holds 50,000 rows of 3,072 bytes
# (157 MB with its labels and file names); nothing in a batch is larger.
CIFAR_MAX_ROWS = 50_000
CIFAR_MAX_BYTES = CIFAR_MAX_ROWS * (3072 + 256) + 2**20
CIFAR_MAX_ELEMENTS = CIFAR_MAX_ROWS * (3072 + 8)  # what np.asarray may expand a batch's values into
# Each element the unpickler puts in a list, tuple or dict was pushed by one opcode, so the opcodes run
# bound what it builds: a batch spends 2-4 per row (a label; a file name and its memo entry).
CIFAR_MAX_OPCODES = CIFAR_MAX_ROWS * 8


def _reconstruct_empty(subtype, shape, dtype):
    """numpy's pickles create an array as _reconstruct(ndarray, (0,), b'b') and fill it by BUILD: that call only."""
    if subtype is not np.ndarray or tuple(shape) != (0,):
        raise pickle.UnpicklingError(f"_reconstruct({getattr(subtype, '__name__', subtype)}, {shape!r}), which "
                                     "numpy's pickles never write")
    return _RECONSTRUCT(subtype, shape, dtype)


def _counted(load):
    """An opcode's loader that first counts it against the batch's budget."""
    def step(self):
        self.opcodes += 1
        if self.opcodes > CIFAR_MAX_OPCODES:
            raise pickle.UnpicklingError(f"it builds more than {CIFAR_MAX_OPCODES:,} elements; a CIFAR batch of "
                                         f"{CIFAR_MAX_ROWS:,} rows builds far fewer")
        load(self)
    return step


class _CifarUnpickler(pickle._Unpickler):  # the Python one: its BUILD can be checked (the C one's cannot)
    dispatch = dict(pickle._Unpickler.dispatch)
    opcodes = 0

    def find_class(self, module: str, name: str):
        try:
            found = _CIFAR_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"it references {module}.{name}, which a CIFAR batch never holds (refused unread: a pickle "
                f"can run code)") from None
        return _reconstruct_empty if found is _RECONSTRUCT else found

    def load_build(self):
        """BUILD sets an object's state: admitted on numpy's arrays and dtypes only, whose __setstate__
        checks it. On anything else (one of the admitted functions themselves) it would set attributes."""
        target = self.stack[-2]
        if not isinstance(target, (np.ndarray, np.dtype)):
            raise pickle.UnpicklingError(f"it sets the state of a {type(target).__name__} (BUILD), which a CIFAR "
                                         "batch never does")
        super().load_build()

    dispatch[pickle.BUILD[0]] = load_build
    dispatch = {code: _counted(load) for code, load in dispatch.items()}


def expanded_size(value, limit: int) -> int:
    """How many elements `value` becomes when numpy converts it, counted over the object graph without
    expanding it (a list referenced twice counts twice: 31 nested pairs are 2^31 elements); stops past
    `limit`. Iterative, so any nesting depth is counted."""
    sizes: dict[int, int] = {}
    stack, on_path = [(value, False)], set()
    while stack:
        obj, children_done = stack.pop()
        key = id(obj)
        if key in sizes:
            continue
        if isinstance(obj, np.ndarray):
            sizes[key] = obj.size
            continue
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else None
        if items is None:
            sizes[key] = 1
            continue
        if children_done:
            on_path.discard(key)
            sizes[key] = min(limit + 1, sum(sizes[id(v)] for v in items))
            continue
        if key in on_path:
            raise pickle.UnpicklingError("it holds a list that contains itself")
        on_path.add(key)
        stack.append((obj, True))
        stack.extend((v, False) for v in items if id(v) not in sizes)
    return sizes[id(value)]


def load_cifar_batch(path: Path) -> dict:
    """A CIFAR python batch ({b'data': uint8 array, b'labels' | b'fine_labels': list, ...}),
    unpickled with only dicts, bytes/str, lists, numbers and numpy arrays admitted, and bounded by the
    format's sizes before anything is built from it: the file's size, then what its values expand to."""
    try:
        size = path.stat().st_size
        if size > CIFAR_MAX_BYTES:
            raise pickle.UnpicklingError(f"it holds {size:,} bytes; the largest CIFAR batch holds {CIFAR_MAX_BYTES:,}")
        with open(path, "rb") as f:
            batch = _CifarUnpickler(f, encoding="bytes").load()
        held = expanded_size(batch, CIFAR_MAX_ELEMENTS)
        if held > CIFAR_MAX_ELEMENTS:
            raise pickle.UnpicklingError(f"its values expand to more than {CIFAR_MAX_ELEMENTS:,} elements (nested "
                                         f"lists referenced many times); a CIFAR batch holds at most "
                                         f"{CIFAR_MAX_ROWS:,} images of 3,072 bytes")
    except Exception as exc:  # whatever a crafted stream makes the unpickler or numpy raise
        raise DataUnavailableError(f"{path} is not a CIFAR python batch: {_one_line(exc)}") from None
    if not isinstance(batch, dict):
        raise DataUnavailableError(f"{path} is not a CIFAR python batch: it holds a {type(batch).__name__}, not a dict")
    for key, value in batch.items():
        if isinstance(value, np.ndarray) and value.dtype.hasobject:
            raise DataUnavailableError(f"{path} is not a CIFAR python batch: {key!r} is an array of Python objects")
    return batch


def load_npz(path: Path, keys: tuple[str, ...], largest: dict[str, int]) -> tuple[np.ndarray, ...]:
    """The arrays `keys` of an .npz archive, plain arrays only (never unpickled), each no larger than the format's
    largest (`largest[key]` bytes): its .npy header is read first, and a size beyond that refused before its data is
    inflated (a 21 MB archive declaring 400,000 images of 64x64x3 inflated to 4.9 GB, then 24 GB as floats, and the
    kernel killed the run). Shapes and types are the caller's to check."""
    try:
        with zipfile.ZipFile(path) as z:
            for key in keys:
                with z.open(f"{key}.npy") as f:
                    header = {(1, 0): np.lib.format.read_array_header_1_0}.get(np.lib.format.read_magic(f),
                                                                                np.lib.format.read_array_header_2_0)
                    shape, _, dtype = header(f)
                size = math.prod(shape) * dtype.itemsize
                if size > largest[key]:
                    raise ValueError(f"{key} declares {dtype} {list(shape)}, {size:,} bytes; the format's holds at "
                                     f"most {largest[key]:,}")
        with np.load(path, allow_pickle=False) as z:
            return tuple(z[k] for k in keys)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, MemoryError) as exc:
        raise DataUnavailableError(f"{path} cannot be read as {', '.join(keys)} arrays ({_one_line(exc)}): "
                                   f"delete it to rebuild it") from None


def extract(archive: Path, folder: Path) -> None:
    """Unpack a .zip or .tar[.gz|.bz2|.xz] into `folder`, refusing members that would land outside
    it (absolute paths, `..`, links out, devices)."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            z.extractall(folder)  # zipfile drops absolute prefixes and `..` from member names
        return
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise DataUnavailableError(f"cannot unpack {archive}: {_one_line(exc)}") from None


def fetch_archive(url: str, folder: Path, name: str, hint: str, md5: str | None = None,
                  unpack: bool = True) -> Path:
    """Download `url` into `folder` (md5 checked when given) and, when `unpack`, extract it there
    (and any archive it holds, as UCI HAR's does). The file's path."""
    from torchvision.datasets.utils import download_url

    folder = Path(folder)
    target = folder / url.rsplit("/", 1)[-1]
    try:
        download_url(url, str(folder), filename=target.name, md5=md5)
    except Exception as exc:  # network errors come in many types
        raise DataUnavailableError(f"could not download {name} ({exc.__class__.__name__}: {_one_line(exc)}). {hint}") from None
    if unpack:
        extract(target, folder)
        if target.suffix == ".zip":
            for inner in sorted(folder.glob("*.zip")):
                if inner != target:
                    extract(inner, folder)
    return target


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or exc.__class__.__name__
