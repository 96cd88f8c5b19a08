"""Data set loaders, registered by name. Each returns a `Dataset` of in-memory tensors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from fedbench.data.base import Dataset, standardize_images
from fedbench.data.population import Population
from fedbench.data.synthetic import PerUserSynthetic, resolve_generator, eval_users as eval_users_of, sequential_users, test_count
from fedbench.data.checksums import verify as verify_checksums
from fedbench.data.idx import read_idx
from fedbench.data.validate import finite, labels, reading, same_length, shaped
from fedbench.data.locations import DEBIAN_FASHION_MNIST, IDX_STEMS, find_idx_file, fmnist_folders
from fedbench.core.errors import DataUnavailableError, check
from fedbench.core.terminal import printable
from fedbench.core.registry import Registry

DATASETS: Registry = Registry("dataset", package="fedbench.data")


@DATASETS.register("digits", "scikit-learn's bundled 8x8 handwritten digits (1,797 images, offline)")
def digits(root: str = "data", download: bool = False, test_fraction: float = 0.2) -> Dataset:
    data = np.loadtxt(_sklearn_data_file("digits.csv.gz"), delimiter=",")  # what sklearn's load_digits reads
    x = torch.tensor(data[:, :-1].reshape(-1, 1, 8, 8), dtype=torch.float32) / 16.0
    y = torch.tensor(data[:, -1].astype(int), dtype=torch.int64)
    # No official split exists: a fixed stratified 80/20 split, the same for every run. The 20% one
    # ships with fedbench (sklearn's own, see the file), so the default run does not import sklearn.
    if test_fraction == 0.2:
        train, test = (np.array(line.split(), dtype=np.int64) for line in
                       (Path(__file__).parent / "digits_split.txt").read_text().splitlines() if not line.startswith("#"))
    else:
        from sklearn.model_selection import train_test_split

        train, test = train_test_split(np.arange(len(y)), test_size=test_fraction, random_state=0, stratify=y.numpy())
    train, test = torch.from_numpy(train), torch.from_numpy(test)
    return Dataset(x[train], y[train], x[test], y[test], num_classes=10, name="digits")


def _sklearn_data_file(name: str) -> Path:
    """A data file bundled with scikit-learn, found without importing it (1-2 s)."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataUnavailableError("digits needs scikit-learn (pip install scikit-learn)")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / name


def _idx_dataset(
    name: str, folders: list[Path], torchvision_cls: str, root: str, download: bool, mean: float | None,
    std: float | None, binary: bool = False,
) -> Dataset:
    def locate() -> dict[str, Path] | None:
        partial = []
        for folder in folders:
            files = {k: find_idx_file(folder, stem) for k, stem in IDX_STEMS.items()}
            if all(files.values()):
                for other, missing in partial:  # never fall back silently past the user's own files
                    print(printable(f"fedbench: {name}: {other} lacks {', '.join(missing)}; reading {folder} instead"),
                          file=sys.stderr)
                return files  # type: ignore[return-value]
            if any(files.values()):
                partial.append((folder, [f"{IDX_STEMS[k]}[.gz]" for k, f in files.items() if f is None]))
        return None

    files = locate()
    if files is None and download:
        import torchvision.datasets

        try:
            getattr(torchvision.datasets, torchvision_cls)(root, train=True, download=True)
            getattr(torchvision.datasets, torchvision_cls)(root, train=False, download=True)
        except Exception as exc:  # network errors come in many types
            raise DataUnavailableError(
                f"could not download {name} ({exc.__class__.__name__}: {exc}). "
                + _missing_hint(name, folders)
            ) from None
        files = locate()
    if files is None:
        raise DataUnavailableError(_missing_hint(name, folders) + " (or set data.download=true)")
    verify_checksums(files.values(), torchvision_cls)
    x_train, y_train, x_test, y_test = read_idx_splits(files, name, 10)
    x_train, x_test = standardize_images(x_train, mean, std), standardize_images(x_test, mean, std)
    if binary:  # LoSAC's DLG task (losac.md §4.1): label <= 5 -> 0, else 1
        return Dataset(x_train, (y_train > 5).float(), x_test, (y_test > 5).float(), num_classes=1, task="binary", name=name)
    return Dataset(x_train, y_train, x_test, y_test, num_classes=10, name=name)


def read_idx_splits(files: dict[str, Path], name: str, num_classes: int, first: int = 0):
    """(x_train, y_train, x_test, y_test) of an image set's four IDX files (IDX_STEMS' keys), checked
    against the format: images [n, 28, 28] with finite pixels (an IDX file may hold
    floats), labels whole numbers in first..first+K-1 as int64 (never floored), one per image."""
    out = []
    for split in ("train", "test"):
        images, tags = read_idx(files[f"{split}_x"], dims=3), read_idx(files[f"{split}_y"], dims=1)
        with reading(files[f"{split}_x"], f"an IDX file of {name} images"):
            x = torch.from_numpy(shaped(finite(images.numpy(), "pixels"), (28, 28), f"{name} images"))
        with reading(files[f"{split}_y"], f"an IDX file of {name} labels"):
            y = torch.from_numpy(labels(tags.numpy(), first, num_classes, owner=name))
            same_length(y, x, "labels", f"images in {files[f'{split}_x'].name}")
        out += [x, y]
    return tuple(out)


def _missing_hint(name: str, folders: list[Path]) -> str:
    stems = ", ".join(f"{s}[.gz]" for s in IDX_STEMS.values())
    debian = " (on Debian/Ubuntu: apt-get install dataset-fashion-mnist)" if DEBIAN_FASHION_MNIST in folders else ""
    return f"{name} not found: place {stems} in {folders[0]}{debian}"


@DATASETS.register("fmnist", "Fashion-MNIST, 28x28 grey, 60,000/10,000 (IDX files; Debian: dataset-fashion-mnist)")
def fmnist(
    root: str = "data", download: bool = False, mean: float | None = 0.2860, std: float | None = 0.3530, binary: bool = False
) -> Dataset:
    """`mean`/`std` null: pixels in [0, 1]; FedADMM normalises FMNIST with MNIST's 0.1307/0.3081."""
    return _idx_dataset("fmnist", fmnist_folders(root), "FashionMNIST", root, download, mean, std, binary)


@DATASETS.register("mnist", "MNIST, 28x28 grey, 60,000/10,000 (IDX files, torchvision download)")
def mnist(
    root: str = "data", download: bool = False, mean: float | None = 0.1307, std: float | None = 0.3081, binary: bool = False
) -> Dataset:
    """`mean`/`std` null: pixels in [0, 1] (LoSAC); 0.5/0.5 maps to [-1, 1] (FedSSO). `binary`: label > 5."""
    folders = [Path(root) / "mnist", Path(root) / "MNIST" / "raw"]
    return _idx_dataset("mnist", folders, "MNIST", root, download, mean, std, binary)


@DATASETS.register("synthetic", "FedProx Synthetic(alpha, beta): 60 features, 10 classes, per-client models")
def synthetic(
    root: str = "data",
    download: bool = False,
    alpha: float = 1.0,
    beta: float = 1.0,
    num_users: int = 30,
    dim: int = 60,
    num_classes: int = 10,
    iid: bool = False,
    seed: int = 0,
    test_fraction: float = 0.2,
    generator: str = "auto",
    eval_users: int = 0,
) -> Dataset:
    """Li et al. (FedProx, 2020) generator (data/synthetic.py): `train_owner` is the natural partition.
    `generator`: sequential (one stream, every user in memory) or per_user (each user from its own
    stream, made when sampled: a population of any size); auto: sequential up to
    synthetic.AUTO_SEQUENTIAL_USERS users, per_user beyond. `eval_users`: the test set is the test data
    of this many users, a fixed sample drawn with `seed` (0 or >= num_users: every user's)."""
    generator = resolve_generator(generator, num_users)
    check(num_users >= 1, f"dataset.num_users must be >= 1, got {num_users}")
    check(eval_users >= 0, f"dataset.eval_users must be >= 0 (0 = every user), got {eval_users}")
    tested = np.zeros(num_users, dtype=bool)
    tested[eval_users_of(seed, num_users, eval_users)] = True
    if generator == "per_user":
        return _per_user_synthetic(PerUserSynthetic(seed, num_users, dim, num_classes, alpha, beta, iid), tested,
                                   test_fraction)
    sizes, users = sequential_users(seed, num_users, dim, num_classes, alpha, beta, iid, progress=num_users >= 5000)
    xs_tr, ys_tr, own, xs_te, ys_te = [], [], [], [], []
    for k, (x, y) in enumerate(users):
        n_test = max(1, int(round(test_fraction * sizes[k])))
        xs_tr.append(x[n_test:]), ys_tr.append(y[n_test:]), own.append(np.full(sizes[k] - n_test, k))
        if tested[k]:
            xs_te.append(x[:n_test]), ys_te.append(y[:n_test])
    return Dataset(
        torch.tensor(np.concatenate(xs_tr), dtype=torch.float32),
        torch.tensor(np.concatenate(ys_tr), dtype=torch.int64),
        torch.tensor(np.concatenate(xs_te), dtype=torch.float32),
        torch.tensor(np.concatenate(ys_te), dtype=torch.int64),
        num_classes=num_classes,
        name="synthetic",
        train_owner=torch.tensor(np.concatenate(own), dtype=torch.int64),
    )


def _per_user_synthetic(gen: PerUserSynthetic, tested: np.ndarray, test_fraction: float) -> Dataset:
    """The per_user generator's population: users made when sampled; only the test users now."""
    n_test = test_count(gen.sizes, test_fraction)

    def train(k: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = gen.user(k)
        return x[n_test[k]:], y[n_test[k]:]

    test_ids = np.flatnonzero(tested)
    if len(test_ids) >= 5000:
        from tqdm import tqdm

        test_ids = tqdm(test_ids, desc="synthetic test users", unit="user", mininterval=1.0, leave=False, disable=None)
    xs_te, ys_te = [], []
    for k in test_ids:
        x, y = gen.user(int(k))
        xs_te.append(x[: n_test[k]]), ys_te.append(y[: n_test[k]])
    return Dataset(
        torch.empty(0, gen.dim, dtype=torch.float32),
        torch.empty(0, dtype=torch.int64),
        torch.tensor(np.concatenate(xs_te), dtype=torch.float32),
        torch.tensor(np.concatenate(ys_te), dtype=torch.int64),
        num_classes=gen.num_classes,
        name="synthetic",
        population=Population(gen.sizes - n_test, train, gen.fingerprint()),
    )
