"""Feature-vector data sets: UCI HAR and ESR (LoSAC), LIBSVM/svmlight files (FedSSO's ijcnn1)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import torch

from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS
from fedbench.data.locations import data_file
from fedbench.data.untrusted import fetch_archive
from fedbench.core.errors import ConfigError, DataUnavailableError, check
from fedbench.core.memory import available_memory
from fedbench.data.validate import FormatError, finite, labels, reading, same_length

HAR_URL = "https://archive.ics.uci.edu/static/public/240/human+activity+recognition+using+smartphones.zip"
ESR_URL = "https://archive.ics.uci.edu/static/public/388/epileptic+seizure+recognition.zip"
LIBSVM_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets"
LIBSVM_SETS = {  # name: (train file, test file, path under LIBSVM_URL)
    "ijcnn1": ("ijcnn1.bz2", "ijcnn1.t.bz2", "binary"),
}


def _download(url: str, folder: Path, name: str, hint: str) -> None:
    fetch_archive(url, folder, name, hint, unpack=url.endswith(".zip"))


def _tensors(x_train, y_train, x_test, y_test, binary: bool, num_classes: int, name: str, owner=None) -> Dataset:
    to_y = (lambda y: torch.tensor(y, dtype=torch.float32)) if binary else (lambda y: torch.tensor(y, dtype=torch.int64))
    return Dataset(
        torch.tensor(x_train, dtype=torch.float32), to_y(y_train), torch.tensor(x_test, dtype=torch.float32),
        to_y(y_test), num_classes=1 if binary else num_classes, task="binary" if binary else "classification",
        name=name, train_owner=None if owner is None else torch.as_tensor(owner, dtype=torch.int64),
    )


ESR_COLUMNS = 180  # an unnamed row id, X1..X178 and y


def _csv_header(path: Path, columns: int) -> None:
    """Refuse, before pandas parses the rows, a CSV whose header names more columns than its format has: pandas made
    a column of each (a 13.9 MB ESR file of 1,000,000 columns took 3.4 GB and 46 s). The header is read with a
    bounded read: a first line longer than the format's is refused unread."""
    import csv

    limit = 64 * columns + 1024
    with open(path, "rb") as f:
        first = f.readline(limit)
    if len(first) >= limit and not first.endswith(b"\n"):
        raise FormatError(f"its first line (the header) is longer than {limit:,} bytes; the format's header names {columns} "
                          "columns")
    names = next(csv.reader([first.decode("utf-8", "replace")]), [])
    if len(names) > columns:
        raise FormatError(f"its header names {len(names):,} columns; the format has {columns}")


def _split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded stratified split of rows `y`, inside its reader's `reading`: a file without rows, or with a label of
    one row, cannot be split so (scikit-learn's ValueError was a traceback); said as the file's fault."""
    from sklearn.model_selection import train_test_split

    values, counts = np.unique(y, return_counts=True)
    if len(y) == 0:
        raise FormatError("it holds no rows")
    if counts.min() < 2:
        raise FormatError(f"the label {values[counts.argmin()]:g} has one row ({(counts < 2).sum():,} of its "
                          f"{len(values):,} labels do), and a stratified split (dataset.test_fraction) needs two of each")
    return train_test_split(np.arange(len(y)), test_size=test_fraction, random_state=seed, stratify=y)


def _har_file(path: Path, kind: str, ndmin: int) -> np.ndarray:
    """One of UCI HAR's text files, checked: features a finite table, labels activities 1..6 and
    subjects volunteers 1..30, whole numbers (never floored)."""
    with reading(path, f"UCI HAR's {kind} (numbers separated by spaces)"):
        with warnings.catch_warnings():  # numpy's "Empty input file" warning: said below, in the file's line
            warnings.simplefilter("ignore", UserWarning)
            values = np.loadtxt(path, ndmin=ndmin)
        if values.size == 0:
            raise FormatError("it holds no rows")
        if kind == "features":
            return finite(values, "features")
        return labels(values, 1, 6 if kind == "labels" else 30, kind, "UCI HAR")


@DATASETS.register("har", "UCI HAR (smartphone activities): 561 features, 6 classes, 7,352/2,947; binary option")
def har(root: str = "data", download: bool = False, binary: bool = False) -> Dataset:
    """The official split's txt files; features used as given (already in [-1, 1], losac.md §4.1).
    `binary`: moving (labels 1-3) -> 0, static (4-6) -> 1 (LoSAC's DLG relabelling).
    `train_owner` = the 21 training volunteers (partition=natural, num_clients=21)."""
    folders = [Path(root) / "har" / "UCI HAR Dataset", Path(root) / "UCI HAR Dataset", Path(root) / "har"]
    hint = (f"har not found: place the 'UCI HAR Dataset' folder (train/X_train.txt, train/y_train.txt, "
            f"train/subject_train.txt, test/X_test.txt, test/y_test.txt) in {folders[0].parent}")
    exists = lambda f: data_file(f / "train" / "X_train.txt") and data_file(f / "test" / "X_test.txt")  # noqa: E731
    found = next((f for f in folders if exists(f)), None)
    if found is None and download:
        _download(HAR_URL, Path(root) / "har", "har", hint)
        found = next((f for f in folders if exists(f)), None)
    if found is None:
        raise DataUnavailableError(hint + " (or set data.download=true)")
    x_train, x_test = (_har_file(found / s / f"X_{s}.txt", "features", ndmin=2) for s in ("train", "test"))
    y_train, y_test = (_har_file(found / s / f"y_{s}.txt", "labels", ndmin=1) for s in ("train", "test"))
    for s, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        with reading(found / s / f"y_{s}.txt", "UCI HAR's activity labels"):
            same_length(y, x, "labels", f"rows in X_{s}.txt")
    with reading(found / "test" / "X_test.txt", "UCI HAR's features"):
        if x_train.shape[1] != x_test.shape[1]:
            raise FormatError(f"{x_test.shape[1]} features per row, X_train.txt {x_train.shape[1]}")
    subject = found / "train" / "subject_train.txt"
    owner = None
    if data_file(subject):
        owner = np.unique(_har_file(subject, "subjects", ndmin=1), return_inverse=True)[1]
        with reading(subject, "UCI HAR's volunteer ids"):
            same_length(owner, x_train, "volunteer ids", "rows in X_train.txt")
    if binary:
        y_train, y_test = (y_train > 3).astype(np.float32), (y_test > 3).astype(np.float32)
    else:
        y_train, y_test = y_train - 1, y_test - 1
    return _tensors(x_train, y_train, x_test, y_test, binary, 6, "har", owner)


@DATASETS.register("esr", "UCI Epileptic Seizure Recognition: 178 features, binary (seizure) or 5 classes, 9,200/2,300")
def esr(
    root: str = "data",
    download: bool = False,
    binary: bool = True,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    standardize: bool = True,
) -> Dataset:
    """losac.md §4.1: binary label = (y == 1) (20% positives); a seeded stratified 80/20 split of
    the 11,500 rows; each feature z-scored with the training statistics. `binary=false`: labels 0..4."""
    check(0 < test_fraction < 1, f"dataset.test_fraction must be in (0, 1), got {test_fraction}")
    names = ("Epileptic Seizure Recognition.csv", "data.csv")
    folders = [Path(root) / "esr", Path(root)]
    find = lambda: next((f / n for f in folders for n in names if data_file(f / n)), None)  # noqa: E731
    hint = f"esr not found: place 'Epileptic Seizure Recognition.csv' (UCI, 11,500 rows x X1..X178, y) in {folders[0]}"
    path = find()
    if path is None and download:
        _download(ESR_URL, folders[0], "esr", hint)
        path = find()
    if path is None:
        raise DataUnavailableError(hint + " (or set data.download=true)")
    import pandas as pd

    with reading(path, "the Epileptic Seizure Recognition CSV (columns X1..X178 and y)"):
        _csv_header(path, ESR_COLUMNS)
        table = pd.read_csv(path)
        feats = [c for c in table.columns if c.startswith("X") and c[1:].isdigit()]
        if "y" not in table.columns or not feats:
            raise FormatError(f"expected columns X1..X178 and y, got {', '.join(map(str, table.columns[:5]))}...")
        x = finite(table[feats].to_numpy(), "the features X1..X178")
        y = labels(table["y"].to_numpy(), 1, 5, "the labels y", "ESR")
        y = (y == 1).astype(np.int64) if binary else y - 1
        tr, te = _split(y, test_fraction, split_seed)
    x_train, x_test = x[tr], x[te]
    if standardize:
        mu, sd = x_train.mean(0), x_train.std(0)
        sd[sd == 0] = 1.0
        x_train, x_test = (x_train - mu) / sd, (x_test - mu) / sd
    return _tensors(x_train, y[tr], x_test, y[te], binary, 5, "esr")


def bounded_text(path: Path):
    """A compressed file's text, read into memory at most a quarter of the memory available (a 21 KB .bz2 of
    325 MB of lines grew the process past 6.8 GB while sklearn parsed it); any other file, its path."""
    import bz2
    import gzip
    import io

    opener = {".bz2": bz2.open, ".gz": gzip.open}.get(path.suffix)
    if opener is None:
        return str(path)
    limit = available_memory() // 4
    with opener(path, "rb") as f:
        text = f.read(limit + 1)
    if len(text) > limit:
        raise FormatError(f"it decompresses to more than {limit:,} bytes (a quarter of the memory available), "
                          "more than its parsed table could take")
    return io.BytesIO(text)


@DATASETS.register("libsvm", "any LIBSVM/svmlight file (path=...) or a named set (set=ijcnn1); binary or multi-class")
def libsvm(
    root: str = "data",
    download: bool = False,
    set: str | None = "ijcnn1",  # noqa: A002  (the LIBSVM site's word)
    path: str | None = None,
    test_path: str | None = None,
    test_fraction: float = 0.2,
    split_seed: int = 0,
) -> Dataset:
    """`path` (and `test_path`) override `set`. Two distinct labels make a binary task (the
    larger -> 1, e.g. ijcnn1's -1/+1 -> 0/1), more make classes 0..K-1 in sorted order. Without a
    test file a seeded stratified split holds out `test_fraction`."""
    from sklearn.datasets import load_svmlight_files

    if path is None:
        if set not in LIBSVM_SETS:
            raise ConfigError(f"dataset.set must be one of {', '.join(LIBSVM_SETS)} (or give dataset.path), got {set!r}")
        train_file, test_file, kind = LIBSVM_SETS[set]
        folder = Path(root) / "libsvm"
        locate = lambda f: next((folder / n for n in (f, f.removesuffix(".bz2")) if data_file(folder / n)), None)  # noqa: E731
        hint = (f"libsvm set {set!r} not found: place {train_file} and {test_file} (or unpacked) "
                f"from {LIBSVM_URL}/{kind}/ in {folder}")
        if (locate(train_file) is None or locate(test_file) is None) and download:
            for f in (train_file, test_file):
                _download(f"{LIBSVM_URL}/{kind}/{f}", folder, set, hint)
        train_path, test_path_ = locate(train_file), locate(test_file)
        if train_path is None or test_path_ is None:
            raise DataUnavailableError(hint + " (or set data.download=true)")
    else:
        train_path, test_path_ = Path(path), None if test_path is None else Path(test_path)
        for p in (train_path, test_path_):
            if p is not None and not data_file(p):
                raise DataUnavailableError(f"libsvm file not found: {p}")
    files = [str(train_path)] + ([] if test_path_ is None else [str(test_path_)])
    what = "svmlight files (label index:value ...)"
    texts = []
    for file in files:
        with reading(Path(file), what):  # each file: a FIFO or a file larger than memory refused unread, a bomb bounded
            texts.append(bounded_text(Path(file)))
    with reading(", ".join(files), what):
        loaded = load_svmlight_files(texts)
        for k, path_ in enumerate(files):
            x_, y_ = loaded[2 * k], loaded[2 * k + 1]
            finite(x_.data, f"the features of {path_}"), finite(y_, f"the labels of {path_}")
            dense = x_.shape[0] * x_.shape[1] * 8  # toarray below makes it dense
            if dense > available_memory():
                raise FormatError(f"{path_} makes a dense table of {x_.shape[0]:,} rows x {x_.shape[1]:,} features "
                                  f"({dense / 2**30:.1f} GiB), more than this machine has available")
            if x_.shape[0] == 0:
                raise FormatError(f"{path_} holds no rows")
        # made dense and split inside the reading too: what fails there is the file's, one line (a MemoryError,
        # a label of one row)
        if test_path_ is None:
            check(0 < test_fraction < 1, f"dataset.test_fraction must be in (0, 1), got {test_fraction}")
            y = loaded[1]
            tr, te = _split(y, test_fraction, split_seed)
            x = loaded[0].toarray()
            x_train, y_train, x_test, y_test = x[tr], y[tr], x[te], y[te]
        else:
            x_train, y_train, x_test, y_test = loaded[0].toarray(), loaded[1], loaded[2].toarray(), loaded[3]
        classes = np.unique(np.concatenate([y_train, y_test]))
        if len(classes) < 2:
            raise FormatError(f"every row has the label {classes[0]:g}: a task of one class has nothing to learn")
    binary = len(classes) == 2
    code = {c: i for i, c in enumerate(classes)}
    y_train, y_test = (np.array([code[v] for v in y]) for y in (y_train, y_test))
    name = set if path is None else Path(path).name
    return _tensors(x_train, y_train, x_test, y_test, binary, len(classes), f"libsvm:{name}")


@DATASETS.register("make_classification", "scikit-learn make_classification (FedSpeed's CPU proxy: 40 features, 10 classes)")
def make_classification(
    root: str = "data",
    download: bool = False,
    n_samples: int = 12000,
    n_test: int = 2000,
    n_features: int = 40,
    n_informative: int = 20,
    n_redundant: int = 5,
    n_classes: int = 10,
    n_clusters_per_class: int = 2,
    class_sep: float = 1.0,
    flip_y: float = 0.02,
    seed: int = 0,
) -> Dataset:
    """fedspeed.md §7.3 `proxy_synth`: features standardised, rows shuffled, the first `n_test` rows
    are the test set. Offline (sklearn's generator)."""
    from sklearn.datasets import make_classification as generate

    check(0 < n_test < n_samples, f"dataset.n_test must be in (0, n_samples={n_samples}), got {n_test}")
    # make_classification's own checks across its parameters (its ValueError was a traceback at the build)
    check(n_informative + n_redundant <= n_features, f"dataset.n_informative={n_informative} + dataset.n_redundant="
          f"{n_redundant} is more than dataset.n_features={n_features}, the features they are among")
    check(math.log2(n_classes * n_clusters_per_class) <= n_informative,  # then 2**n_informative is small
          f"dataset.n_classes={n_classes} x dataset.n_clusters_per_class={n_clusters_per_class} clusters are more than the "
          f"2**{n_informative} = {2**n_informative} corners of the hypercube of dataset.n_informative={n_informative} "
          "features they sit at; raise n_informative, or lower n_classes or n_clusters_per_class")
    x, y = generate(n_samples=n_samples, n_features=n_features, n_informative=n_informative, n_redundant=n_redundant,
                    n_classes=n_classes, n_clusters_per_class=n_clusters_per_class, class_sep=class_sep, flip_y=flip_y,
                    random_state=seed)
    x = (x - x.mean(0)) / x.std(0)
    perm = np.random.default_rng(seed).permutation(n_samples)
    x, y = x[perm], y[perm]
    return _tensors(x[n_test:], y[n_test:], x[:n_test], y[:n_test], False, n_classes, "make_classification")
