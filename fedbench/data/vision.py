"""Image data sets of the papers: EMNIST, CIFAR-10/100, Tiny-ImageNet.

Each is read from its original distribution format in `data.root` (offline), or downloaded
there first when `data.download=true`. Pixels are scaled to [0, 1] and then normalised per
channel with `mean`/`std` (null: no normalisation).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedbench.data.augment import image_augment
from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS, read_idx_splits
from fedbench.data.locations import data_file, find_idx_file
from fedbench.data.untrusted import fetch_archive, load_cifar_batch, load_npz
from fedbench.data.validate import FormatError, labels, reading, same_length, shaped
from fedbench.core.errors import ConfigError, DataUnavailableError

EMNIST_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10, "mnist": 10}


def normalize(x: Tensor, mean: float | list[float] | None, std: float | list[float] | None) -> Tensor:
    """uint8 [n, C, H, W] -> float32 in [0, 1], then per channel (x - mean) / std."""
    x = x.float() / 255.0
    if mean is None or std is None:
        return x
    shape = (1, -1, 1, 1)
    return (x - torch.tensor(mean, dtype=torch.float32).reshape(shape)) / torch.tensor(std, dtype=torch.float32).reshape(shape)


def first_existing(folders: list[Path], test) -> Path | None:
    return next((f for f in folders if test(f)), None)


def download_error(name: str, exc: Exception, hint: str) -> DataUnavailableError:
    return DataUnavailableError(f"could not download {name} ({exc.__class__.__name__}: {exc}). {hint}")


# -- EMNIST ---------------------------------------------------------------------------------


@DATASETS.register("emnist", "EMNIST (IDX files; split digits by default, FedSSO A8): 28x28 grey")
def emnist(
    root: str = "data",
    download: bool = False,
    split: str = "digits",
    mean: float | None = 0.5,
    std: float | None = 0.5,
) -> Dataset:
    """Images as torchvision stores them (transposed relative to MNIST, as in the FedSSO code).
    `letters` labels 1..26 become 0..25."""
    if split not in EMNIST_CLASSES:
        raise ConfigError(f"dataset.split must be one of {', '.join(EMNIST_CLASSES)}, got {split!r}")
    folders = [Path(root) / "emnist", Path(root) / "EMNIST" / "raw"]
    stems = {k: f"emnist-{split}-{s}" for k, s in (("train_x", "train-images-idx3-ubyte"), ("train_y", "train-labels-idx1-ubyte"),
                                                   ("test_x", "test-images-idx3-ubyte"), ("test_y", "test-labels-idx1-ubyte"))}

    def locate():
        for folder in folders:
            files = {k: find_idx_file(folder, s) for k, s in stems.items()}
            if all(files.values()):
                return files
        return None

    hint = f"emnist not found: place {', '.join(s + '[.gz]' for s in stems.values())} in {folders[0]}"
    files = locate()
    if files is None and download:
        import torchvision.datasets

        try:
            torchvision.datasets.EMNIST(root, split=split, train=True, download=True)
        except Exception as exc:  # network errors come in many types
            raise download_error("emnist", exc, hint) from None
        files = locate()
    if files is None:
        raise DataUnavailableError(hint + " (or set data.download=true)")
    shift = 1 if split == "letters" else 0
    x_train, y_train, x_test, y_test = read_idx_splits(files, f"emnist-{split}", EMNIST_CLASSES[split], first=shift)
    y_train, y_test = y_train - shift, y_test - shift
    x_train, x_test = (normalize(x.unsqueeze(1), mean, std) for x in (x_train, x_test))
    return Dataset(x_train, y_train, x_test, y_test, num_classes=EMNIST_CLASSES[split], name="emnist")


# -- CIFAR ----------------------------------------------------------------------------------


def _read_cifar_batches(paths: list[Path], label_key: bytes, num_classes: int) -> tuple[Tensor, Tensor]:
    """Images [n, 3, 32, 32] uint8 and labels [n] int64 of CIFAR python batches, each checked against the
    format: `data` a uint8 array of rows of 3,072 bytes, labels whole numbers 0..K-1, one per row."""
    xs, ys = [], []
    for path in paths:
        batch = load_cifar_batch(path)
        with reading(path, "a CIFAR python batch"):
            for key in (b"data", label_key):
                if key not in batch:
                    raise FormatError(f"it has no {key.decode()!r} entry (it has {', '.join(map(repr, batch)) or 'none'})")
            data = batch[b"data"]
            if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
                raise FormatError(f"'data' must be an array of bytes (uint8), got {getattr(data, 'dtype', type(data).__name__)}")
            xs.append(shaped(data, (3072,), "'data'").reshape(-1, 3, 32, 32))
            ys.append(labels(batch[label_key], 0, num_classes, f"{label_key.decode()!r}"))
            same_length(ys[-1], xs[-1], "labels", "images")
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


CIFAR10_BATCHES = ([f"data_batch_{i}" for i in range(1, 6)], ["test_batch"])  # (train, test) file names


def cifar_folder(root: str, name: str, folder: str, files: list[str]) -> Path | None:
    """The first of a CIFAR set's folders under `root` that holds all its python batches, or None."""
    folders = [Path(root) / name / folder, Path(root) / folder, Path(root) / name]
    return first_existing(folders, lambda f: all(data_file(f / n) for n in files))


def _cifar(name: str, root: str, download: bool, folder: str, train: list[str], test: list[str], label_key: bytes,
           num_classes: int, tv_cls: str, mean, std, augment, augment_pad, augment_crop_prob) -> Dataset:
    hint = (f"{name} not found: place the python-version batches ({', '.join(train + test)}) in "
            f"{Path(root) / name / folder}")
    found = cifar_folder(root, name, folder, train + test)
    if found is None and download:
        import torchvision.datasets

        source = getattr(torchvision.datasets, tv_cls)  # its published URL and md5 only: the class unpickles
        fetch_archive(source.url, Path(root), name, hint, md5=source.tgz_md5)
        found = cifar_folder(root, name, folder, train + test)
    if found is None:
        raise DataUnavailableError(hint + " (or set data.download=true)")
    x_train, y_train = _read_cifar_batches([found / n for n in train], label_key, num_classes)
    x_test, y_test = _read_cifar_batches([found / n for n in test], label_key, num_classes)
    return Dataset(
        normalize(x_train, mean, std), y_train, normalize(x_test, mean, std), y_test, num_classes=num_classes,
        name=name, augment=image_augment(augment, augment_pad, augment_crop_prob),
    )


@DATASETS.register("cifar10", "CIFAR-10, 3x32x32, 50,000/10,000 (python batches); optional crop+flip augmentation")
def cifar10(
    root: str = "data",
    download: bool = False,
    mean: list[float] | None = (0.491, 0.482, 0.447),
    std: list[float] | None = (0.247, 0.243, 0.262),
    augment: bool = False,
    augment_pad: int = 4,
    augment_crop_prob: float = 0.5,
) -> Dataset:
    return _cifar("cifar10", root, download, "cifar-10-batches-py", *CIFAR10_BATCHES, b"labels", 10, "CIFAR10", mean, std, augment, augment_pad, augment_crop_prob)


@DATASETS.register("cifar100", "CIFAR-100 (fine labels), 3x32x32, 50,000/10,000 (python batches); optional augmentation")
def cifar100(
    root: str = "data",
    download: bool = False,
    mean: list[float] | None = (0.5071, 0.4867, 0.4408),
    std: list[float] | None = (0.2675, 0.2565, 0.2761),
    augment: bool = False,
    augment_pad: int = 4,
    augment_crop_prob: float = 0.5,
) -> Dataset:
    return _cifar("cifar100", root, download, "cifar-100-python", ["train"], ["test"], b"fine_labels", 100,
                  "CIFAR100", mean, std, augment, augment_pad, augment_crop_prob)


# -- Tiny-ImageNet --------------------------------------------------------------------------

TINY_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_ROWS = {"train": 100_000, "test": 10_000}  # its train and labelled val images
TINY_LARGEST = {**{f"x_{s}": n * 64 * 64 * 3 for s, n in TINY_ROWS.items()}, **{f"y_{s}": n * 8 for s, n in TINY_ROWS.items()}}


def _read_images(paths: list[Path]) -> np.ndarray:
    from PIL import Image

    out = np.empty((len(paths), 64, 64, 3), dtype=np.uint8)
    for i, p in enumerate(paths):
        with reading(p, "a 64x64 Tiny-ImageNet image"), Image.open(p) as im:
            if im.size != (64, 64):  # checked before decoding: a small file may declare a huge image
                raise FormatError(f"it is {im.size[0]}x{im.size[1]} pixels")
            out[i] = np.asarray(im.convert("RGB"))  # a few Tiny-ImageNet images are greyscale
    return out


def _read_tiny(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    with reading(folder / "wnids.txt", "Tiny-ImageNet's list of class ids"):
        wnids = sorted((folder / "wnids.txt").read_text().split())  # ImageFolder's (sorted) class order
        if not wnids or len(set(wnids)) != len(wnids) or len(wnids) > 200:
            raise FormatError(f"it names {len(wnids)} classes ({len(set(wnids))} distinct); Tiny-ImageNet has 200")
    cls = {w: i for i, w in enumerate(wnids)}
    train = [(p, cls[w]) for w in wnids for p in sorted((folder / "train" / w / "images").glob("*.JPEG"))]
    val = []
    annotations = folder / "val" / "val_annotations.txt"
    with reading(annotations, "Tiny-ImageNet's validation labels (image<TAB>wnid per line)"):
        for n, line in enumerate(annotations.read_text().splitlines(), 1):
            fields = line.split("\t")
            if len(fields) >= 2:
                if fields[1] not in cls or Path(fields[0]).name != fields[0]:
                    raise FormatError(f"line {n} names {fields[1]!r} / {fields[0]!r}: not a class of wnids.txt and "
                                      f"an image file name")
                val.append((folder / "val" / "images" / fields[0], cls[fields[1]]))
    if not train or not val:
        raise DataUnavailableError(f"{folder}: no images under train/<wnid>/images or val/images")
    return (_read_images([p for p, _ in train]), np.array([c for _, c in train]),
            _read_images([p for p, _ in val]), np.array([c for _, c in val]))


def _checked_cache(path: Path, arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The cached arrays, checked as _read_tiny makes them: uint8 images [n, 64, 64, 3], labels 0..199."""
    with reading(path, "fedbench's Tiny-ImageNet cache (delete it to rebuild it)"):
        x_train, y_train, x_test, y_test = arrays
        for x, y, split in ((x_train, y_train, "x_train"), (x_test, y_test, "x_test")):
            if x.dtype != np.uint8:
                raise FormatError(f"{split} must hold bytes (uint8), got {x.dtype}")
            shaped(x, (64, 64, 3), split)
            same_length(labels(y, 0, 200, f"the labels of {split}"), x, "labels", f"images in {split}")
        return x_train, labels(y_train, 0, 200), x_test, labels(y_test, 0, 200)


@DATASETS.register("tinyimagenet", "Tiny-ImageNet-200, 3x64x64, 100,000/10,000 (labelled val set; folder layout)")
def tinyimagenet(
    root: str = "data",
    download: bool = False,
    mean: list[float] | None = (0.5, 0.5, 0.5),
    std: list[float] | None = (0.5, 0.5, 0.5),
    augment: bool = False,
    augment_pad: int = 8,
    augment_crop_prob: float = 0.5,
    cache: bool = True,
) -> Dataset:
    """The standard `tiny-imagenet-200/` folder (wnids.txt, train/<wnid>/images/*.JPEG,
    val/images + val/val_annotations.txt). The decoded arrays are cached next to it as
    `fedbench_cache.npz` (`cache=false` to skip), since decoding 110,000 JPEGs takes minutes."""
    folders = [Path(root) / "tinyimagenet" / "tiny-imagenet-200", Path(root) / "tiny-imagenet-200", Path(root) / "tinyimagenet"]
    hint = (f"tinyimagenet not found: unpack {TINY_URL} so that {folders[0]}/wnids.txt, train/<wnid>/images/ "
            f"and val/val_annotations.txt exist")
    found = first_existing(folders, lambda f: data_file(f / "wnids.txt"))
    if found is None and download:
        fetch_archive(TINY_URL, Path(root) / "tinyimagenet", "tinyimagenet", hint)
        found = first_existing(folders, lambda f: data_file(f / "wnids.txt"))
    if found is None:
        raise DataUnavailableError(hint + " (or set data.download=true)")
    cached = found / "fedbench_cache.npz"
    if cache and data_file(cached):
        arrays = _checked_cache(cached, load_npz(cached, ("x_train", "y_train", "x_test", "y_test"), TINY_LARGEST))
    else:
        arrays = _read_tiny(found)
        if cache:
            np.savez(cached, x_train=arrays[0], y_train=arrays[1], x_test=arrays[2], y_test=arrays[3])
    x_train, x_test = (normalize(torch.from_numpy(a).permute(0, 3, 1, 2), mean, std) for a in (arrays[0], arrays[2]))
    return Dataset(
        x_train, torch.from_numpy(arrays[1]).long(), x_test, torch.from_numpy(arrays[3]).long(), num_classes=200,
        name="tinyimagenet", augment=image_augment(augment, augment_pad, augment_crop_prob),
    )
