"""Text data sets: Shakespeare and Sent140, from LEAF's JSON (natural users) or from the raw
corpora FedSSO used (fedsso.md §4.3: tiny-shakespeare and the Sentiment140 CSV, contiguous
split into `num_users` clients). Users become `train_owner` for partition=natural.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import torch

from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS
from fedbench.data.locations import data_file
from fedbench.core.errors import ConfigError, DataUnavailableError, check
from fedbench.data.validate import FormatError, finite, of_type, reading, same_length, string

# LEAF's shakespeare alphabet (models/utils/language_utils.py): 80 symbols
LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


def read_leaf(folder: Path, x_item, y_item) -> tuple[list[str], list[list], list[list]]:
    """All users of a LEAF split folder (*.json: users, user_data{user: {x, y}}), in file order, each
    file checked against LEAF's format: an object, `users` a list of names, each user's x and y lists
    of equal length whose items pass `x_item` / `y_item` (which raise FormatError)."""
    users, xs, ys = [], [], []
    for path in sorted(folder.glob("*.json")):
        with reading(path, "a LEAF JSON file"):
            blob = of_type(json.loads(path.read_text()), dict, "the top level")
            data = of_type(blob.get("user_data"), dict, "'user_data'")
            for u in of_type(blob.get("users"), list, "'users'"):
                string(u, "a user name")
                if u not in data:
                    raise FormatError(f"user {u!r} has no entry in 'user_data'")
                x, y = (of_type(of_type(data[u], dict, f"user {u!r}'s data").get(k), list, f"user {u!r}'s {k!r}")
                        for k in ("x", "y"))
                same_length(x, y, f"inputs of user {u!r}", "labels")
                for item in x:
                    x_item(item)
                for item in y:
                    y_item(item)
                users.append(u), xs.append(x), ys.append(y)
    if not any(xs):  # a split of no samples was numpy's reshape traceback (an empty array of no known width)
        raise DataUnavailableError(f"{folder} is not a LEAF split folder: its *.json files hold no samples")
    return users, xs, ys


def _windows(length: int | None = None):
    """A check of LEAF Shakespeare windows: text, all of one length (`length`, else the first one's)."""
    seen = [length]

    def check(value) -> None:
        if not string(value, "a window"):  # an empty first window let windows of any length through (a traceback)
            raise FormatError("a window holds no characters")
        seen[0] = seen[0] or len(value)
        if len(value) != seen[0]:
            raise FormatError(f"a window holds {len(value)} characters, the others {seen[0]}: {value[:40]!r}")
    return check


def _tweet(value) -> None:
    """A LEAF Sent140 input: [id, date, query, user, text] (or the text alone)."""
    if isinstance(value, list) and len(value) >= 5:
        value = value[4]
    string(value, "a tweet (LEAF's [id, date, query, user, text])")


def _polarity(value) -> None:
    if isinstance(value, bool) or value not in (0, 1):
        raise FormatError(f"a Sent140 label must be 0 or 1, got {value!r}")


def _leaf_folders(root: str, name: str) -> tuple[Path, Path] | None:
    for base in (Path(root) / name / "data", Path(root) / name):
        if any((base / "train").glob("*.json")) and any((base / "test").glob("*.json")):
            return base / "train", base / "test"
    return None


def _leaf_or_raise(root: str, name: str) -> tuple[Path, Path]:
    found = _leaf_folders(root, name)
    if found is None:
        raise DataUnavailableError(
            f"{name} (LEAF) not found: run LEAF's preprocess.sh and place data/train/*.json and data/test/*.json "
            f"in {Path(root) / name / 'data'} (LEAF data cannot be downloaded by fedbench)"
        )
    return found


def _owner_train_test(
    n_users: int, per_user: list[int], test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-user seeded train/test split of contiguous user blocks: (train idx, test idx, owner of train)."""
    rng = np.random.default_rng(seed)
    train, test, owner, start = [], [], [], 0
    for u in range(n_users):
        idx = start + rng.permutation(per_user[u])
        k = int(round(test_fraction * per_user[u]))
        test.append(np.sort(idx[:k])), train.append(np.sort(idx[k:])), owner.append(np.full(per_user[u] - k, u))
        start += per_user[u]
    return np.concatenate(train), np.concatenate(test), np.concatenate(owner)


def _encode(tokens: np.ndarray, vocab: int, encoding: str) -> torch.Tensor:
    t = torch.from_numpy(tokens).long()
    return torch.nn.functional.one_hot(t, vocab).float() if encoding == "onehot" else t


@DATASETS.register("shakespeare", "next character: LEAF JSON (natural users) or tiny-shakespeare (FedSSO, 10 contiguous clients)")
def shakespeare(
    root: str = "data",
    download: bool = False,
    source: str = "tiny",
    seq_len: int = 50,
    num_users: int = 10,
    test_fraction: float = 0.25,
    encoding: str = "onehot",
    seed: int = 0,
) -> Dataset:
    """source=tiny (fedsso.md §4.3): `input.txt`, its 65 distinct characters, non-overlapping
    windows of `seq_len` characters with the next character as label, cut in text order into
    `num_users` clients, each split train/test by `test_fraction`. source=leaf: LEAF's 80-character
    windows and alphabet, users as clients, LEAF's own train/test files.
    encoding=onehot gives float [n, L, V] (for mclr), index gives int64 [n, L] (for embeddings)."""
    check(encoding in ("onehot", "index"), f"dataset.encoding must be onehot or index, got {encoding!r}")
    if source == "leaf":
        train_dir, test_dir = _leaf_or_raise(root, "shakespeare")
        lookup = {c: i for i, c in enumerate(LEAF_LETTERS)}  # unknown symbols map to 0 (newline)

        def encode(strings: list[str]) -> np.ndarray:
            return np.array([[lookup.get(c, 0) for c in s] for s in strings], dtype=np.int64).reshape(len(strings), -1)

        window, label = _windows(), _windows(1)  # one length across both splits
        users, xs, ys = read_leaf(train_dir, window, label)
        test_users, txs, tys = read_leaf(test_dir, window, label)
        x_train = encode([s for x in xs for s in x])
        y_train = encode([s for y in ys for s in y])[:, 0]
        owner = np.repeat(np.arange(len(users)), [len(x) for x in xs])
        x_test = encode([s for x in txs for s in x])
        y_test = encode([s for y in tys for s in y])[:, 0]
        vocab = len(LEAF_LETTERS)
    elif source == "tiny":
        folder = Path(root) / "shakespeare"
        path = folder / "input.txt"
        hint = f"shakespeare (tiny) not found: place input.txt ({TINY_SHAKESPEARE_URL}) in {folder}"
        if not data_file(path) and download:
            from torchvision.datasets.utils import download_url

            try:
                download_url(TINY_SHAKESPEARE_URL, str(folder), filename="input.txt")
            except Exception as exc:
                raise DataUnavailableError(f"could not download shakespeare ({exc.__class__.__name__}: {exc}). {hint}") from None
        if not data_file(path):
            raise DataUnavailableError(hint + " (or set data.download=true)")
        with reading(path, "a UTF-8 text file"):
            text = path.read_text(encoding="utf-8")
        chars = sorted(set(text))
        lookup = {c: i for i, c in enumerate(chars)}
        codes = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
        n = (len(codes) - 1) // seq_len
        check(n >= num_users, f"shakespeare: {n} windows of {seq_len} characters for {num_users} users")
        windows = codes[: n * seq_len].reshape(n, seq_len)
        targets = codes[seq_len : n * seq_len + 1 : seq_len]
        per_user = [len(a) for a in np.array_split(np.arange(n), num_users)]
        tr, te, owner = _owner_train_test(num_users, per_user, test_fraction, seed)
        x_train, y_train, x_test, y_test = windows[tr], targets[tr], windows[te], targets[te]
        vocab = len(chars)
    else:
        raise ConfigError(f"dataset.source must be tiny or leaf, got {source!r}")
    return Dataset(
        _encode(x_train, vocab, encoding), torch.from_numpy(y_train).long(), _encode(x_test, vocab, encoding),
        torch.from_numpy(y_test).long(), num_classes=vocab, name="shakespeare", train_owner=torch.from_numpy(owner),
    )


_TOKEN = re.compile(r"[\w']+|[.,!?;]")  # LEAF's split_line


def _read_glove(path: Path, words: set[str]) -> dict[str, np.ndarray]:
    """The vectors of `words` in a GloVe text file (word, then its numbers, per line): all of one
    length, finite."""
    vectors = {}
    with reading(path, "a GloVe text file (a word and its numbers per line)"), open(path, encoding="utf8") as f:
        for n, line in enumerate(f, 1):
            word, _, rest = line.rstrip().partition(" ")
            if word in words:
                vectors[word] = finite(np.array(rest.split(), dtype=np.float32), f"line {n}'s numbers")
                if len(vectors[word]) != len(next(iter(vectors.values()))) or not len(vectors[word]):
                    raise FormatError(f"line {n} holds {len(vectors[word])} numbers, the first vector "
                                      f"{len(next(iter(vectors.values())))}")
    if not vectors:
        raise DataUnavailableError(f"{path}: no word of the corpus found (not a GloVe text file?)")
    return vectors


def _embed(texts: list[str], glove: Path, max_len: int) -> np.ndarray:
    """Mean GloVe vector of the first `max_len` tokens (lower-cased); zeros if none is known."""
    tokens = [_TOKEN.findall(t.lower())[:max_len] for t in texts]
    vectors = _read_glove(glove, {w for ts in tokens for w in ts})
    dim = len(next(iter(vectors.values())))
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, ts in enumerate(tokens):
        known = [vectors[w] for w in ts if w in vectors]
        if known:
            out[i] = np.mean(known, axis=0)
    return out


def _read_sentiment140(path: Path, limit: int | None) -> tuple[list[str], np.ndarray]:
    texts, labels = [], []
    with reading(path, "a Sentiment140 CSV file"), open(path, encoding="latin-1", newline="") as f:
        for row in csv.reader(f):
            if len(row) < 6 or row[0] not in ("0", "4"):  # the test file's neutral tweets (2) are dropped
                continue
            texts.append(row[5]), labels.append(1.0 if row[0] == "4" else 0.0)
            if limit is not None and len(texts) >= limit:
                break
    if not texts:
        raise DataUnavailableError(f"{path}: no Sentiment140 rows (polarity,id,date,query,user,text)")
    return texts, np.array(labels, dtype=np.float32)


@DATASETS.register("sent140", "tweet sentiment (binary), mean GloVe features: LEAF JSON (users) or Sentiment140 CSV (FedSSO)")
def sent140(
    root: str = "data",
    download: bool = False,
    source: str = "csv",
    glove: str | None = None,
    max_len: int = 200,
    num_users: int = 10,
    limit: int | None = None,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> Dataset:
    """Features: the mean of the GloVe vectors (`glove`, default data.root/glove/glove.twitter.27B.50d.txt)
    of a tweet's first `max_len` tokens (fedsso.md §4.4 recommendation). source=csv: Go et al.'s
    training.1600000.processed.noemoticon.csv in file order (`limit` rows), cut into `num_users`
    contiguous clients, each split train/test by `test_fraction` (fedsso.md §4.3). source=leaf:
    LEAF's users and train/test files."""
    glove_path = Path(glove) if glove else Path(root) / "glove" / "glove.twitter.27B.50d.txt"
    if not data_file(glove_path):
        raise DataUnavailableError(
            f"GloVe vectors not found: place glove.twitter.27B.50d.txt (https://nlp.stanford.edu/projects/glove/) "
            f"at {glove_path} or set dataset.glove"
        )
    if source == "leaf":
        train_dir, test_dir = _leaf_or_raise(root, "sent140")
        _, xs, ys = read_leaf(train_dir, _tweet, _polarity)
        _, txs, tys = read_leaf(test_dir, _tweet, _polarity)
        tweets = lambda rows: [r[4] if isinstance(r, list) else r for x in rows for r in x]  # noqa: E731
        x_train, x_test = _embed(tweets(xs), glove_path, max_len), _embed(tweets(txs), glove_path, max_len)
        y_train = np.array([v for y in ys for v in y], dtype=np.float32)
        y_test = np.array([v for y in tys for v in y], dtype=np.float32)
        owner = np.repeat(np.arange(len(xs)), [len(x) for x in xs])
    elif source == "csv":
        path = Path(root) / "sent140" / "training.1600000.processed.noemoticon.csv"
        if not data_file(path):
            raise DataUnavailableError(
                f"sent140 not found: unpack trainingandtestdata.zip (Go et al. 2009, Sentiment140) so that {path} exists"
            )
        texts, labels = _read_sentiment140(path, limit)
        features = _embed(texts, glove_path, max_len)
        per_user = [len(a) for a in np.array_split(np.arange(len(texts)), num_users)]
        check(min(per_user) >= 2, f"sent140: {len(texts)} tweets for {num_users} users")
        tr, te, owner = _owner_train_test(num_users, per_user, test_fraction, seed)
        x_train, y_train, x_test, y_test = features[tr], labels[tr], features[te], labels[te]
    else:
        raise ConfigError(f"dataset.source must be csv or leaf, got {source!r}")
    return Dataset(
        torch.from_numpy(x_train), torch.from_numpy(y_train), torch.from_numpy(x_test), torch.from_numpy(y_test),
        num_classes=1, task="binary", name="sent140", train_owner=torch.from_numpy(owner).long(),
    )
