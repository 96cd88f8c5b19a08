"""Where data files are looked up, with no heavy import: `fedbench list` checks them in milliseconds."""

from __future__ import annotations

import os
from pathlib import Path

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

IDX_STEMS = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def data_file(path: Path) -> bool:
    """Whether a data file stands at `path` (a regular file, or a link to one); a FIFO, a device or a folder taking
    its name is named in one line (core.user_files)."""
    from fedbench.core.errors import DataUnavailableError
    from fedbench.core.user_files import user_file

    return user_file(path, "a data file", DataUnavailableError)


def find_idx_file(folder: Path, stem: str) -> Path | None:
    """`train-images-idx3-ubyte` as is or gzipped, also under torchvision's `<Name>/raw/` layout (a FIFO, device
    or folder under either name is named: data_file)."""
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if data_file(candidate):
            return candidate
    return None


def fmnist_folders(root: str) -> list[Path]:
    """The folders `fmnist` is read from, in order: $FEDBENCH_FMNIST_DIR, data.root, Debian's."""
    folders = [Path(root) / "fmnist", Path(root) / "FashionMNIST" / "raw", DEBIAN_FASHION_MNIST]
    if env := os.environ.get("FEDBENCH_FMNIST_DIR"):
        folders.insert(0, Path(env))
    return folders


def fmnist_folder(root: str = "data") -> Path | None:
    """Where `fmnist` would be read from (the first folder holding all four IDX files), or None."""
    from fedbench.core.errors import DataUnavailableError

    for folder in fmnist_folders(root):
        try:
            if all(find_idx_file(folder, stem) for stem in IDX_STEMS.values()):
                return folder
        except DataUnavailableError:  # an entry that is no file: the run names it, the listing reads on
            continue
    return None
