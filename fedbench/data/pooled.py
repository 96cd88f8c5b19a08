"""FedSSO's data protocol (fedsso.md §4.1-4.2) as a data set: pool a base set's train and test
splits, deal the pool to clients with the PFL-Non-IID generator, split every client 75/25, and
evaluate on the union of the clients' test parts. Use with partition=natural."""

from __future__ import annotations

import numpy as np
import torch

from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS
from fedbench.data.skews import pfl_separate, pfl_train_test
from fedbench.core.errors import ConfigError, check


@DATASETS.register("pfl", "FedSSO protocol: base set's train+test pooled, PFL-Non-IID clients, 75/25 split per client")
def pfl(
    root: str = "data",
    download: bool = False,
    base: str = "mnist",
    base_args: dict | None = None,
    num_users: int = 20,
    train_size: float = 0.75,
    least_samples: float = 16,
    rng_seed: int = 1,
) -> Dataset:
    """`rng_seed=1` is the authors' np.random.seed(1): with MNIST and 20 users it gives their
    published client label counts and test splits exactly (tests/data/test_paper_partitions.py)."""
    if base == "pfl" or base not in DATASETS:
        others = ", ".join(n for n in DATASETS.names() if n != "pfl")
        raise ConfigError(f"dataset.base must name another data set ({others}), got {base!r}")
    check(num_users >= 2, f"dataset.num_users must be >= 2, got {num_users}")
    check(0 < train_size < 1, f"dataset.train_size must be in (0, 1), got {train_size}")
    try:
        data = DATASETS.get(base)(root=root, download=download, **(base_args or {}))
    except TypeError as exc:
        raise ConfigError(f"dataset.base_args do not fit data set {base!r}: {exc}") from None
    x = torch.cat([data.x_train, data.x_test])
    y = torch.cat([data.y_train, data.y_test])
    labels = y.numpy() if data.task == "classification" else y.numpy().round().astype(np.int64)
    rs = np.random.RandomState(rng_seed)
    train, test = pfl_train_test(pfl_separate(labels, num_users, rs, least_samples), labels, rs, train_size)
    tr, te = torch.from_numpy(np.concatenate(train)), torch.from_numpy(np.concatenate(test))
    owner = torch.from_numpy(np.repeat(np.arange(num_users), [len(p) for p in train]))
    return Dataset(x[tr], y[tr], x[te], y[te], num_classes=data.num_classes, task=data.task, name=f"pfl:{base}",
                   train_owner=owner, augment=data.augment)
