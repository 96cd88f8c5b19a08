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
from fedbench.data.datasets import DATASETS
from fedbench.data.idx import read_idx
from fedbench.data.locations import find_idx_file
from fedbench.data.untrusted import fetch_archive, load_cifar_batch, load_npz
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
    y_train, y_test = (read_idx(files[k]).long() - shift for k in ("train_y", "test_y"))
    x_train, x_test = (normalize(read_idx(files[k]).unsqueeze(1), mean, std) for k in ("train_x", "test_x"))
    return Dataset(x_train, y_train, x_test, y_test, num_classes=EMNIST_CLASSES[split], name="emnist")


# -- CIFAR ----------------------------------------------------------------------------------


def _read_cifar_batches(paths: list[Path], label_key: bytes) -> tuple[Tensor, Tensor]:
    xs, ys = [], []
    for path in paths:
        batch = load_cifar_batch(path)
        try:
            xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(batch[label_key], dtype=np.int64))
        except (KeyError, ValueError, TypeError) as exc:
            raise DataUnavailableError(f"{path} is not a CIFAR python batch ({exc.__class__.__name__}: {exc})") from None
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


def _cifar(name: str, root: str, download: bool, folder: str, train: list[str], test: list[str], label_key: bytes,
           num_classes: int, tv_cls: str, mean, std, augment, augment_pad, augment_crop_prob) -> Dataset:
    folders = [Path(root) / name / folder, Path(root) / folder, Path(root) / name]

    def has_all(f: Path) -> bool:
        return all((f / n).is_file() for n in train + test)

    hint = f"{name} not found: place the python-version batches ({', '.join(train + test)}) in {folders[0]}"
    found = first_existing(folders, has_all)
    if found is None and download:
        import torchvision.datasets

        source = getattr(torchvision.datasets, tv_cls)  # its published URL and md5 only: the class unpickles
        fetch_archive(source.url, Path(root), name, hint, md5=source.tgz_md5)
        found = first_existing(folders, has_all)
    if found is None:
        raise DataUnavailableError(hint + " (or set data.download=true)")
    x_train, y_train = _read_cifar_batches([found / n for n in train], label_key)
    x_test, y_test = _read_cifar_batches([found / n for n in test], label_key)
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
    return _cifar("cifar10", root, download, "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)],
                  ["test_batch"], b"labels", 10, "CIFAR10", mean, std, augment, augment_pad, augment_crop_prob)


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


def _read_images(paths: list[Path]) -> np.ndarray:
    from PIL import Image

    out = np.empty((len(paths), 64, 64, 3), dtype=np.uint8)
    for i, p in enumerate(paths):
        with Image.open(p) as im:
            out[i] = np.asarray(im.convert("RGB"))  # a few Tiny-ImageNet images are greyscale
    return out


def _read_tiny(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    wnids = sorted((folder / "wnids.txt").read_text().split())  # ImageFolder's (sorted) class order
    cls = {w: i for i, w in enumerate(wnids)}
    train = [(p, cls[w]) for w in wnids for p in sorted((folder / "train" / w / "images").glob("*.JPEG"))]
    val = []
    for line in (folder / "val" / "val_annotations.txt").read_text().splitlines():
        fields = line.split("\t")
        if len(fields) >= 2:
            val.append((folder / "val" / "images" / fields[0], cls[fields[1]]))
    if not train or not val:
        raise DataUnavailableError(f"{folder}: no images under train/<wnid>/images or val/images")
    return (_read_images([p for p, _ in train]), np.array([c for _, c in train]),
            _read_images([p for p, _ in val]), np.array([c for _, c in val]))


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
    found = first_existing(folders, lambda f: (f / "wnids.txt").is_file())
    if found is None and download:
        fetch_archive(TINY_URL, Path(root) / "tinyimagenet", "tinyimagenet", hint)
        found = first_existing(folders, lambda f: (f / "wnids.txt").is_file())
    if found is None:
        raise DataUnavailableError(hint + " (or set data.download=true)")
    cached = found / "fedbench_cache.npz"
    if cache and cached.is_file():
        arrays = load_npz(cached, ("x_train", "y_train", "x_test", "y_test"))
    else:
        arrays = _read_tiny(found)
        if cache:
            np.savez(cached, x_train=arrays[0], y_train=arrays[1], x_test=arrays[2], y_test=arrays[3])
    x_train, x_test = (normalize(torch.from_numpy(a).permute(0, 3, 1, 2), mean, std) for a in (arrays[0], arrays[2]))
    return Dataset(
        x_train, torch.from_numpy(arrays[1]).long(), x_test, torch.from_numpy(arrays[3]).long(), num_classes=200,
        name="tinyimagenet", augment=image_augment(augment, augment_pad, augment_crop_prob),
    )
