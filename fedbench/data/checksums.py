"""Published checksums of data files, checked before a file is read.

Sources that publish checksums: torchvision's download tables (the md5 of each original .gz of
MNIST and Fashion-MNIST) and Debian's package md5sums (dpkg verifies them at install; the
Debian Fashion-MNIST files are re-compressed, so their md5 differs from the original's; a copy
of them elsewhere is recognised by Debian's recorded md5).
Uncompressed files have no published checksum; the IDX reader checks their exact size.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from collections.abc import Iterable
from pathlib import Path

from fedbench.core.errors import DataUnavailableError

DPKG_INFO = Path("/var/lib/dpkg/info")


@functools.cache
def torchvision_md5(torchvision_cls: str) -> dict[str, str]:
    """{file name: md5} of a torchvision data set's original download files."""
    import torchvision.datasets

    resources = getattr(getattr(torchvision.datasets, torchvision_cls, None), "resources", [])
    return {Path(name).name: md5 for name, md5 in resources if md5}


@functools.cache
def dpkg_md5(path: Path) -> str | None:
    """The md5 Debian's package database records for an installed file, or None."""
    if not DPKG_INFO.is_dir() or not str(path).startswith("/usr/"):
        return None
    try:
        owner = subprocess.run(["dpkg-query", "-S", str(path)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    package = owner.stdout.split(":", 1)[0].strip() if owner.returncode == 0 else ""
    sums = DPKG_INFO / f"{package}.md5sums"
    if not package or not sums.is_file():
        return None
    for line in sums.read_text().splitlines():
        md5, _, name = line.partition("  ")
        if "/" + name == str(path):
            return md5
    return None


# Debian's dataset-fashion-mnist (0.0~git20200523.55506a9-1) md5sums: its re-compressed files, also when
# copied out of /usr/share (then dpkg no longer vouches for them)
DEBIAN_RECOMPRESSED = {
    "FashionMNIST": {
        "train-images-idx3-ubyte.gz": "cf8536b0aa1a6ac5fa3f23001093305c",
        "train-labels-idx1-ubyte.gz": "10bea18fdb374794d4bb42e356e600c9",
        "t10k-images-idx3-ubyte.gz": "f78720b4224f21cce2f2ccf2d7a94c9a",
        "t10k-labels-idx1-ubyte.gz": "0d30e22e447f3c33dab9ed536400ac01",
    },
}


def file_md5(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def verify(files: Iterable[Path], torchvision_cls: str) -> None:
    """Raise DataUnavailableError for a file whose md5 differs from its published one."""
    for path in files:
        path = Path(path).resolve()
        expected, source = dpkg_md5(path), "Debian package"
        if expected is None:
            expected, source = torchvision_md5(torchvision_cls).get(path.name), f"torchvision {torchvision_cls}"
        if expected is None:
            continue
        actual = file_md5(path)
        if actual != expected and actual != DEBIAN_RECOMPRESSED.get(torchvision_cls, {}).get(path.name):
            raise DataUnavailableError(
                f"{path} is corrupt or not the original file: md5 {actual}, published {expected} ({source}). "
                "Delete it and place a fresh copy (or set data.download=true)"
            )
