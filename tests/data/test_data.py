"""Loaders on files in the exact original formats, written by the tests themselves."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

from tests.conftest import require_data
from fedbench.data import DATASETS
from fedbench.data.locations import DEBIAN_FASHION_MNIST
from fedbench.data.idx import read_idx
from fedbench.core.errors import DataUnavailableError


def write_idx(path, array: np.ndarray, compress: bool) -> None:
    code = {np.uint8: 0x08, np.int32: 0x0C, np.float32: 0x0D}[array.dtype.type]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    body = array.astype(array.dtype.newbyteorder(">")).tobytes()
    (gzip.open if compress else open)(path, "wb").write(header + body)


def write_mnist_like(folder, n_train=50, n_test=20, compress=False, seed=0):
    """Original IDX files (uncompressed: a .gz under the original name must match the published md5)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    data = {}
    for stem, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        suffix = ".gz" if compress else ""
        write_idx(folder / f"{stem}-images-idx3-ubyte{suffix}", images, compress)
        write_idx(folder / f"{stem}-labels-idx1-ubyte{suffix}", labels, compress)
        data[stem] = (images, labels)
    return data


@pytest.mark.parametrize("compress", [True, False])
def test_idx_roundtrip(tmp_path, compress):
    arr = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4) - 7
    write_idx(tmp_path / "a.idx", arr, compress)
    assert torch.equal(read_idx(tmp_path / "a.idx"), torch.from_numpy(arr))


def test_idx_truncated_is_a_clear_error(tmp_path):
    write_idx(tmp_path / "a.idx", np.zeros((10, 5), np.uint8), False)
    raw = (tmp_path / "a.idx").read_bytes()
    (tmp_path / "a.idx").write_bytes(raw[:-3])
    with pytest.raises(DataUnavailableError, match="truncated"):
        read_idx(tmp_path / "a.idx")
    (tmp_path / "b.idx").write_bytes(b"\x12\x34garbage")
    with pytest.raises(DataUnavailableError, match="magic"):
        read_idx(tmp_path / "b.idx")


@pytest.mark.parametrize("layout", ["mnist", "MNIST/raw"])
def test_mnist_loader_reads_both_layouts(tmp_path, layout):
    data = write_mnist_like(tmp_path / layout)
    ds = DATASETS.get("mnist")(root=str(tmp_path))
    assert ds.x_train.shape == (50, 1, 28, 28) and ds.x_test.shape == (20, 1, 28, 28)
    assert torch.equal(ds.y_train, torch.from_numpy(data["train"][1]).long())
    expected = (data["train"][0][3].astype(np.float32) / 255 - 0.1307) / 0.3081
    assert np.allclose(ds.x_train[3, 0].numpy(), expected, atol=1e-6)


def test_missing_files_offline_names_the_folder(tmp_path):
    with pytest.raises(DataUnavailableError, match=str(tmp_path / "mnist")):
        DATASETS.get("mnist")(root=str(tmp_path))


def test_digits_split_is_fixed():
    a, b = DATASETS.get("digits")(), DATASETS.get("digits")()
    assert a.x_train.shape == (1437, 1, 8, 8) and a.x_test.shape == (360, 1, 8, 8)
    assert torch.equal(a.y_test, b.y_test)


def test_fashion_mnist_from_debian_package():
    require_data(DEBIAN_FASHION_MNIST.is_dir(), f"Fashion-MNIST not installed at {DEBIAN_FASHION_MNIST}")
    ds = DATASETS.get("fmnist")(root="/nonexistent")
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert torch.equal(torch.bincount(ds.y_train), torch.full((10,), 6000))
    assert abs(float(ds.x_train.mean())) < 0.01  # standardised


def test_debian_fashion_mnist_copied_elsewhere_is_recognised(tmp_path, monkeypatch):
    """Debian re-compresses the files (their md5 is not torchvision's); a copy outside /usr/share, where
    dpkg no longer vouches for it, still loads, and a re-compressed copy of anyone else's is still refused."""
    import shutil

    from fedbench.core.errors import DataUnavailableError

    require_data(DEBIAN_FASHION_MNIST.is_dir(), f"Fashion-MNIST not installed at {DEBIAN_FASHION_MNIST}")
    copy = tmp_path / "fm"
    shutil.copytree(DEBIAN_FASHION_MNIST, copy)
    monkeypatch.setenv("FEDBENCH_FMNIST_DIR", str(copy))
    assert DATASETS.get("fmnist")(root="/nonexistent").x_test.shape == (10000, 1, 28, 28)
    labels = copy / "t10k-labels-idx1-ubyte.gz"
    labels.write_bytes(gzip.compress(gzip.decompress(labels.read_bytes()), compresslevel=1))
    with pytest.raises(DataUnavailableError, match="t10k-labels-idx1-ubyte.gz is corrupt or not the original file"):
        DATASETS.get("fmnist")(root="/nonexistent")


def test_synthetic_natural_partition():
    ds = DATASETS.get("synthetic")(num_users=5, alpha=0.5, beta=0.5)
    assert ds.x_train.shape[1] == 60 and set(ds.train_owner.tolist()) == set(range(5))


def test_digits_without_sklearn_equals_sklearns_load_and_split():
    """The default data set reads sklearn's bundled file and the shipped split without importing
    sklearn (start-up, issue 20): the same tensors as load_digits + train_test_split(stratify)."""
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from fedbench.data.datasets import digits

    d = digits()
    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(bunch.target)
    train, test = train_test_split(np.arange(len(y)), test_size=0.2, random_state=0, stratify=bunch.target)
    assert torch.equal(d.x_train, x[train]) and torch.equal(d.y_train, y[train])
    assert torch.equal(d.x_test, x[test]) and torch.equal(d.y_test, y[test])
    code = "import sys; from fedbench.data.datasets import digits; digits(); assert 'sklearn' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0
