"""The papers' data sets, each read from small files in its exact original format written here,
and the minibatch augmentation hook."""

from __future__ import annotations

import csv
import json
import pickle

import numpy as np
import pytest
import torch

from tests.conftest import make_cfg
from fedbench.data import DATASETS
from fedbench.data.augment import RandomCropFlip
from fedbench.core.errors import ConfigError, DataUnavailableError
from tests.data.test_data import write_idx


def load(name, root, **kw):
    return DATASETS.get(name)(root=str(root), **kw)


# -- EMNIST ---------------------------------------------------------------------------------


def write_emnist(folder, split, n=(30, 12), num_classes=10, shift=0, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for part, size in zip(("train", "test"), n):
        images = rng.integers(0, 256, (size, 28, 28), dtype=np.uint8)
        labels = (rng.integers(0, num_classes, size) + shift).astype(np.uint8)
        write_idx(folder / f"emnist-{split}-{part}-images-idx3-ubyte.gz", images, True)
        write_idx(folder / f"emnist-{split}-{part}-labels-idx1-ubyte", labels, False)
        out[part] = (images, labels)
    return out


def test_emnist_idx(tmp_path):
    data = write_emnist(tmp_path / "EMNIST" / "raw", "digits")
    ds = load("emnist", tmp_path)
    assert ds.x_train.shape == (30, 1, 28, 28) and ds.x_test.shape == (12, 1, 28, 28) and ds.num_classes == 10
    assert torch.equal(ds.y_test, torch.from_numpy(data["test"][1]).long())
    torch.testing.assert_close(ds.x_train[5, 0], torch.from_numpy(data["train"][0][5]).float() / 255 * 2 - 1)
    letters = write_emnist(tmp_path / "emnist", "letters", num_classes=26, shift=1)
    ds = load("emnist", tmp_path, split="letters", mean=None, std=None)
    assert ds.num_classes == 26 and torch.equal(ds.y_train, torch.from_numpy(letters["train"][1]).long() - 1)
    assert float(ds.x_train.min()) >= 0.0
    with pytest.raises(DataUnavailableError, match="emnist-balanced-train-images"):
        load("emnist", tmp_path, split="balanced")
    with pytest.raises(ConfigError, match="split"):
        load("emnist", tmp_path, split="bogus")


# -- CIFAR ----------------------------------------------------------------------------------


def write_cifar_batch(path, n, label_keys, num_classes, rng):
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    batch = {b"batch_label": b"testing batch", b"data": data, b"filenames": [b"x.png"] * n}
    labels = {}
    for key in label_keys:
        labels[key] = rng.integers(0, num_classes, n).tolist()
        batch[key] = labels[key]
    with open(path, "wb") as f:
        pickle.dump(batch, f, protocol=2)  # the original batches are Python-2 pickles with bytes keys
    return data, labels


def test_cifar10_python_batches(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    train = [write_cifar_batch(folder / f"data_batch_{i}", 4, [b"labels"], 10, rng) for i in range(1, 6)]
    test = write_cifar_batch(folder / "test_batch", 6, [b"labels"], 10, rng)
    ds = load("cifar10", tmp_path, mean=None, std=None)
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (6, 3, 32, 32)
    assert ds.y_train.tolist() == sum((t[1][b"labels"] for t in train), [])
    # channel-major rows: value (c, h, w) is at c*1024 + h*32 + w
    raw = train[2][0][1]
    assert float(ds.x_train[9, 2, 5, 7]) == pytest.approx(raw[2 * 1024 + 5 * 32 + 7] / 255)
    std = load("cifar10", tmp_path)
    expected = (test[0][3, 1024 + 40] / 255 - 0.482) / 0.243  # green channel, row 1, column 8
    assert float(std.x_test[3, 1, 1, 8]) == pytest.approx(expected, rel=1e-5)
    assert std.augment is None and load("cifar10", tmp_path, augment=True).augment is not None


def test_cifar100_fine_labels(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    _, labels = write_cifar_batch(folder / "train", 10, [b"fine_labels", b"coarse_labels"], 100, rng)
    write_cifar_batch(folder / "test", 5, [b"fine_labels", b"coarse_labels"], 100, rng)
    ds = load("cifar100", tmp_path)
    assert ds.num_classes == 100 and ds.y_train.tolist() == labels[b"fine_labels"]
    with pytest.raises(DataUnavailableError, match="data_batch_1"):
        load("cifar10", tmp_path)


# -- Tiny-ImageNet --------------------------------------------------------------------------


def test_tinyimagenet_folder_layout(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(2)
    base = tmp_path / "tinyimagenet" / "tiny-imagenet-200"
    wnids = ["n02", "n01", "n03"]  # class ids are the sorted wnids
    (base / "val" / "images").mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    for w in wnids:
        (base / "train" / w / "images").mkdir(parents=True)
        for k in range(2):
            pixels = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
            img = Image.fromarray(pixels[..., 0], "L") if (w, k) == ("n03", 1) else Image.fromarray(pixels)
            img.save(base / "train" / w / "images" / f"{w}_{k}.JPEG")
    lines = []
    for k, w in enumerate(["n03", "n01", "n01", "n02"]):
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(base / "val" / "images" / f"val_{k}.JPEG")
        lines.append(f"val_{k}.JPEG\t{w}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    ds = load("tinyimagenet", tmp_path, mean=None, std=None)
    assert ds.x_train.shape == (6, 3, 64, 64) and ds.num_classes == 200
    assert ds.y_train.tolist() == [0, 0, 1, 1, 2, 2] and ds.y_test.tolist() == [2, 0, 0, 1]
    decoded = np.asarray(Image.open(base / "train" / "n01" / "images" / "n01_1.JPEG").convert("RGB"))
    torch.testing.assert_close(ds.x_train[1].permute(1, 2, 0), torch.from_numpy(decoded.copy()).float() / 255)
    grey = ds.x_train[5]
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])  # greyscale -> RGB
    assert (base / "fedbench_cache.npz").is_file()
    again = load("tinyimagenet", tmp_path, mean=None, std=None)
    assert torch.equal(again.x_train, ds.x_train) and torch.equal(again.y_test, ds.y_test)
    with pytest.raises(DataUnavailableError, match="wnids.txt"):
        load("tinyimagenet", tmp_path / "elsewhere")


# -- UCI HAR, ESR, LIBSVM -------------------------------------------------------------------


def write_har(base, n_train=12, n_test=5, d=561, seed=3):
    rng = np.random.default_rng(seed)
    out = {}
    for part, n in (("train", n_train), ("test", n_test)):
        (base / part).mkdir(parents=True, exist_ok=True)
        x = rng.uniform(-1, 1, (n, d))
        y = rng.integers(1, 7, n)
        # the original layout: fixed-width columns of '%15.7e' numbers separated by spaces
        (base / part / f"X_{part}.txt").write_text("\n".join(" ".join(f"{v:15.7e}" for v in row) for row in x) + "\n")
        (base / part / f"y_{part}.txt").write_text("\n".join(map(str, y)) + "\n")
        (base / part / f"subject_{part}.txt").write_text("\n".join(str(s) for s in rng.choice([1, 3, 5], n)) + "\n")
        out[part] = (x, y)
    return out


def test_har_txt(tmp_path):
    data = write_har(tmp_path / "har" / "UCI HAR Dataset")
    ds = load("har", tmp_path)
    assert ds.x_train.shape == (12, 561) and ds.x_test.shape == (5, 561) and ds.num_classes == 6
    assert ds.y_train.tolist() == (data["train"][1] - 1).tolist()
    np.testing.assert_allclose(ds.x_test.numpy(), data["test"][0], rtol=1e-6, atol=1e-7)
    assert set(ds.train_owner.tolist()) <= {0, 1, 2}
    binary = load("har", tmp_path, binary=True)
    assert binary.task == "binary" and binary.y_train.tolist() == (data["train"][1] > 3).astype(float).tolist()
    with pytest.raises(DataUnavailableError, match="UCI HAR Dataset"):
        load("har", tmp_path / "none")


def write_esr(path, per_class=10, seed=4):
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    x = rng.integers(-500, 500, (5 * per_class, 178))
    y = np.repeat(np.arange(1, 6), per_class)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([""] + [f"X{j}" for j in range(1, 179)] + ["y"])  # the original header: an unnamed id column
        for i in range(len(y)):
            w.writerow([f"X{i}.V1.{i}"] + x[i].tolist() + [int(y[i])])
    return x, y


def test_esr_csv(tmp_path):
    x, y = write_esr(tmp_path / "esr" / "Epileptic Seizure Recognition.csv")
    ds = load("esr", tmp_path)
    assert ds.x_train.shape == (40, 178) and ds.x_test.shape == (10, 178) and ds.task == "binary"
    assert ds.y_train.sum() == 8 and ds.y_test.sum() == 2  # stratified: 20% seizures in both
    assert ds.x_train.mean(0).abs().max() < 1e-5 and (ds.x_train.std(0, unbiased=False) - 1).abs().max() < 1e-4
    multi = load("esr", tmp_path, binary=False, standardize=False)
    assert multi.num_classes == 5 and torch.bincount(multi.y_train).tolist() == [8] * 5
    row = np.flatnonzero((x == multi.x_test[0].numpy().astype(int)).all(1))
    assert len(row) == 1 and y[row[0]] - 1 == multi.y_test[0]
    assert torch.equal(load("esr", tmp_path).y_test, ds.y_test)  # the split is fixed by split_seed


def write_svmlight(path, x, y):
    with open(path, "w") as f:
        for row, label in zip(x, y):
            feats = " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(row) if v != 0)
            f.write(f"{label:g} {feats}\n")


def test_libsvm_named_set_and_path(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (30, 22)) * (rng.random((30, 22)) < 0.5)
    y = np.where(rng.random(30) < 0.3, 1, -1)
    (tmp_path / "libsvm").mkdir()
    write_svmlight(tmp_path / "libsvm" / "ijcnn1", x[:20], y[:20])
    write_svmlight(tmp_path / "libsvm" / "ijcnn1.t", x[20:], y[20:])
    ds = load("libsvm", tmp_path)
    assert ds.task == "binary" and ds.x_train.shape == (20, 22) and ds.x_test.shape == (10, 22)
    assert ds.y_train.tolist() == (y[:20] == 1).astype(float).tolist()
    np.testing.assert_allclose(ds.x_test.numpy(), x[20:], rtol=1e-5)
    labels = rng.integers(0, 3, 30) * 2 + 1  # classes 1, 3, 5 -> 0, 1, 2
    write_svmlight(tmp_path / "multi.svm", x, labels)
    multi = load("libsvm", tmp_path, path=str(tmp_path / "multi.svm"), test_fraction=0.2)
    assert multi.num_classes == 3 and len(multi.y_train) == 24 and set(multi.y_train.tolist()) <= {0, 1, 2}
    with pytest.raises(DataUnavailableError, match="ijcnn1"):
        load("libsvm", tmp_path / "none")


def test_a_compressed_libsvm_file_that_inflates_past_memory_is_one_line_unparsed(tmp_path, monkeypatch):
    """A 21 KB ijcnn1.bz2 of 325 MB of lines grew the process past 6.8 GB while sklearn parsed it: the text is
    read at most a quarter of the memory available, here made 4 MB; a file that fits still loads."""
    import bz2

    from fedbench.data import tabular

    folder = tmp_path / "libsvm"
    folder.mkdir()
    (folder / "ijcnn1.bz2").write_bytes(bz2.compress(b"1 1:1\n-1 2:1\n" * 400_000))  # 5.6 MB of text
    write_svmlight(folder / "ijcnn1.t", np.eye(2), np.array([1, -1]))
    monkeypatch.setattr(tabular, "available_memory", lambda: 4 * 2**20)
    with pytest.raises(DataUnavailableError, match=r"ijcnn1.bz2 is not svmlight files .*: it decompresses to more "
                                                   r"than 1,048,576 bytes \(a quarter of the memory available\)"):
        load("libsvm", tmp_path)
    (folder / "ijcnn1.bz2").write_bytes(bz2.compress(b"1 1:1\n-1 2:1\n" * 1000))
    ds = load("libsvm", tmp_path)
    assert ds.x_train.shape == (2000, 2) and ds.y_train.sum() == 1000


# -- Shakespeare, Sent140 -------------------------------------------------------------------


def write_leaf(folder, users, xs, ys):
    folder.mkdir(parents=True, exist_ok=True)
    blob = {"users": users, "num_samples": [len(x) for x in xs],
            "user_data": {u: {"x": x, "y": y} for u, x, y in zip(users, xs, ys)}}
    (folder / "all_data_niid_0_keep_0_train_9.json").write_text(json.dumps(blob))


def test_shakespeare_tiny(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 6
    (tmp_path / "shakespeare").mkdir()
    (tmp_path / "shakespeare" / "input.txt").write_text(text)
    ds = load("shakespeare", tmp_path, seq_len=10, num_users=3, test_fraction=0.25, encoding="index")
    chars = sorted(set(text))
    n = (len(text) - 1) // 10
    assert ds.num_classes == len(chars) and len(ds.y_train) + len(ds.y_test) == n
    # the samples are exactly the non-overlapping windows with the character that follows each
    expected = sorted((text[j * 10:j * 10 + 10], text[j * 10 + 10]) for j in range(n))
    decode = lambda x, y: ("".join(chars[i] for i in x), chars[y])  # noqa: E731
    got = [decode(x, y) for x, y in zip(torch.cat([ds.x_train, ds.x_test]), torch.cat([ds.y_train, ds.y_test]))]
    assert sorted(got) == expected
    owner = ds.train_owner.tolist()
    assert owner == sorted(owner) and set(owner) == {0, 1, 2}
    onehot = load("shakespeare", tmp_path, seq_len=10, num_users=3)
    assert onehot.x_train.shape == (len(ds.y_train), 10, len(chars))
    assert torch.equal(onehot.x_train.argmax(-1), ds.x_train)


def test_shakespeare_leaf(tmp_path):
    base = tmp_path / "shakespeare" / "data"
    write_leaf(base / "train", ["A", "B"], [["to be or n", "ot to be, "], ["hello worl"]], [["o", "t"], ["d"]])
    write_leaf(base / "test", ["A", "B"], [["that is th"], ["goodbye wo"]], [["e"], ["r"]])
    ds = load("shakespeare", tmp_path, source="leaf", encoding="index")
    from fedbench.data.text import LEAF_LETTERS

    assert ds.num_classes == 80 and ds.x_train.shape == (3, 10)
    assert "".join(LEAF_LETTERS[i] for i in ds.x_train[2]) == "hello worl"
    assert [LEAF_LETTERS[i] for i in ds.y_train] == ["o", "t", "d"] and ds.train_owner.tolist() == [0, 0, 1]
    with pytest.raises(ConfigError, match="source"):
        load("shakespeare", tmp_path, source="nope")


def write_glove(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("good 1.0 0.0 2.0\nbad -1.0 0.5 0.0\nday 0.0 1.0 1.0\n!! 9 9 9\n")
    return {"good": np.array([1.0, 0, 2]), "bad": np.array([-1.0, 0.5, 0]), "day": np.array([0.0, 1, 1])}


def test_sent140_csv_and_leaf(tmp_path):
    glove = write_glove(tmp_path / "glove" / "glove.twitter.27B.50d.txt")
    rows = [("0", "bad day"), ("0", "Bad, BAD day!"), ("4", "good day"), ("4", "good"), ("2", "neutral"),
            ("4", "unknown words"), ("0", "bad"), ("4", "a good day")]
    (tmp_path / "sent140").mkdir()
    with open(tmp_path / "sent140" / "training.1600000.processed.noemoticon.csv", "w", encoding="latin-1", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        for i, (pol, text) in enumerate(rows):
            w.writerow([pol, str(1000 + i), "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", f"user{i}", text])
    ds = load("sent140", tmp_path, num_users=2, test_fraction=0.0)
    assert ds.task == "binary" and ds.x_train.shape == (7, 3) and ds.train_owner.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert ds.y_train.tolist() == [0, 0, 1, 1, 1, 0, 1]  # the neutral tweet is dropped
    np.testing.assert_allclose(ds.x_train[1].numpy(), (2 * glove["bad"] + glove["day"]) / 3, rtol=1e-6)
    assert ds.x_train[4].abs().sum() == 0  # no known word -> zero features
    base = tmp_path / "sent140" / "data"
    tweet = lambda t: ["1", "date", "NO_QUERY", "u", t]  # noqa: E731
    write_leaf(base / "train", ["u1", "u2"], [[tweet("good day")], [tweet("bad"), tweet("bad day")]], [[1], [0, 0]])
    write_leaf(base / "test", ["u1"], [[tweet("good")]], [[1]])
    leaf = load("sent140", tmp_path, source="leaf")
    assert leaf.train_owner.tolist() == [0, 1, 1] and leaf.y_test.tolist() == [1.0]
    np.testing.assert_allclose(leaf.x_train[0].numpy(), (glove["good"] + glove["day"]) / 2, rtol=1e-6)
    with pytest.raises(DataUnavailableError, match="glove"):
        load("sent140", tmp_path / "none")


# -- augmentation ---------------------------------------------------------------------------


def test_crop_flip_is_a_shifted_window():
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).reshape(1, 2, 3, 6, 6) + 1
    keys = torch.arange(2)[None]
    flipped = RandomCropFlip(pad=0, crop_prob=0.0, flip_prob=1.0)(x, keys)
    assert torch.equal(flipped, x.flip(-1))
    same = RandomCropFlip(pad=2, crop_prob=0.0, flip_prob=0.0)(x, keys)
    assert torch.equal(same, x)
    aug = RandomCropFlip(pad=2, crop_prob=1.0, flip_prob=0.0)
    for k in range(40):
        out = aug(x, torch.tensor([[k, k + 1000]]))
        padded = torch.nn.functional.pad(x[0], (2, 2, 2, 2))
        for i in range(2):
            hits = [(dy, dx) for dy in range(5) for dx in range(5)
                    if torch.equal(out[0, i], padded[i, :, dy:dy + 6, dx:dx + 6])]
            assert hits, "every crop is a window of the zero-padded image"
    assert torch.equal(aug(x, keys), aug(x, keys))  # a pure function of the keys


def write_tiny_cifar(root, n_per_batch=8):
    rng = np.random.default_rng(7)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i in range(1, 6):
        write_cifar_batch(folder / f"data_batch_{i}", n_per_batch, [b"labels"], 10, rng)
    write_cifar_batch(folder / "test_batch", 8, [b"labels"], 10, rng)


def test_augmentation_through_the_engine_is_chunk_and_executor_invariant(tmp_path):
    from fedbench.runs.build import build_federation
    from fedbench.engine.loop import run

    write_tiny_cifar(tmp_path)
    base = [f"data.root={tmp_path}", "dataset=cifar10", "model=fedsso/lenet", "partition=iid", "num_clients=4",
            "clients_per_round=4", "rounds=2", "batch_size=4", "local_epochs=1", "eval_every=0", "eta_l=0.05"]

    def model_after(*extra):
        fed, _ = build_federation(make_cfg(*base, *extra))
        return fed.algorithm.model(run(fed).server).clone()

    a = model_after("dataset.augment=true", "engine.client_chunk=4", "engine.executor=vmap")
    b = model_after("dataset.augment=true", "engine.client_chunk=1", "engine.executor=loop")
    c = model_after("dataset.augment=false", "engine.client_chunk=4", "engine.executor=vmap")
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(a, c, atol=1e-6)


def test_mnist_normalisation_and_binary_options(tmp_path):
    from tests.data.test_data import write_mnist_like

    data = write_mnist_like(tmp_path / "mnist")
    raw = load("mnist", tmp_path, mean=None, std=None)
    torch.testing.assert_close(raw.x_train[2, 0], torch.from_numpy(data["train"][0][2]).float() / 255)
    binary = load("mnist", tmp_path, binary=True)
    assert binary.task == "binary" and binary.num_classes == 1
    assert binary.y_test.tolist() == (data["t10k"][1] > 5).astype(float).tolist()


@pytest.mark.parametrize("name,kwargs,match", [
    ("esr", {}, "Epileptic Seizure Recognition.csv"), ("shakespeare", {}, "input.txt"),
    ("shakespeare", {"source": "leaf"}, "train/\\*.json"), ("cifar100", {}, "cifar-100-python"),
])
def test_missing_files_say_where_to_put_what(tmp_path, name, kwargs, match):
    with pytest.raises(DataUnavailableError, match=match):
        load(name, tmp_path, **kwargs)


def test_pfl_pools_and_splits_per_client():
    from fedbench.data.skews import pfl_separate, pfl_train_test

    base = load("digits", "data")
    ds = load("pfl", "data", base="digits", num_users=5, least_samples=2, rng_seed=1)
    pooled_y = torch.cat([base.y_train, base.y_test]).numpy()
    pooled_x = torch.cat([base.x_train, base.x_test])
    rs = np.random.RandomState(1)
    train, test = pfl_train_test(pfl_separate(pooled_y, 5, rs, 2), pooled_y, rs, 0.75)
    assert len(ds.y_train) + len(ds.y_test) == len(pooled_y)
    assert torch.equal(ds.x_test, pooled_x[np.concatenate(test)])
    for u in range(5):
        mine = ds.train_owner == u
        assert torch.equal(ds.x_train[mine], pooled_x[train[u]])
        assert abs(len(train[u]) - 3 * len(test[u])) <= 4  # 75/25 per client
    with pytest.raises(ConfigError, match="dataset.base"):
        load("pfl", "data", base="pfl")
    with pytest.raises(ConfigError, match="base_args"):
        load("pfl", "data", base="digits", base_args={"nonsense": 1})


def test_pfl_config_builds_a_federation_of_its_users():
    from fedbench.runs.build import build_federation

    fed, info = build_federation(make_cfg(
        "dataset=fedsso/mnist", "dataset.base=digits", "~dataset.base_args", "dataset.num_users=4",
        "dataset.least_samples=2", "partition=natural", "num_clients=4", "clients_per_round=4", "model=fedsso/cnn"))
    owner = fed.dataset.train_owner
    assert fed.clients.size.tolist() == torch.bincount(owner).tolist()
    assert info.num_train + info.num_test == 1797 and info.dim == 6230 - 196 * 30 + 16 * 30


def test_make_classification_proxy():
    from sklearn.datasets import make_classification

    ds = load("make_classification", "data", n_samples=600, n_test=100, seed=3)
    assert ds.x_train.shape == (500, 40) and ds.x_test.shape == (100, 40) and ds.num_classes == 10
    x, y = make_classification(n_samples=600, n_features=40, n_informative=20, n_redundant=5, n_classes=10,
                               n_clusters_per_class=2, class_sep=1.0, flip_y=0.02, random_state=3)
    allx = torch.cat([ds.x_test, ds.x_train])
    assert allx.mean(0).abs().max() < 1e-5 and (allx.std(0, unbiased=False) - 1).abs().max() < 1e-4
    assert sorted(torch.cat([ds.y_test, ds.y_train]).tolist()) == sorted(y.tolist())
    assert torch.equal(load("make_classification", "data", n_samples=600, n_test=100, seed=3).x_test, ds.x_test)


def test_crop_flip_probabilities():
    x = torch.rand(1, 4000, 1, 5, 5)
    keys = torch.arange(4000)[None] * 7919 + 13
    flipped = RandomCropFlip(pad=0, crop_prob=0.0, flip_prob=0.5)(x, keys)
    share = (flipped != x).flatten(2).any(-1).float().mean()
    assert 0.46 < share < 0.54
    cropped = RandomCropFlip(pad=2, crop_prob=0.5, flip_prob=0.0)(x, keys)
    unchanged = (cropped == x).flatten(2).all(-1).float().mean()
    assert 0.48 < unchanged < 0.56  # no crop (1/2) or the centred window (1/2 x 1/25)
