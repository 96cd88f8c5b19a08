"""FedSpeed's CPU proxy data set (papers/fedspeed.md §7.3): scikit-learn's make_classification."""

from __future__ import annotations

import torch

from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS


@DATASETS.register("proxy_synth", "FedSpeed §7.3 proxy: make_classification, 40 features, 10 classes, 10,000/2,000")
def proxy_synth(
    root: str = "data",
    download: bool = False,
    n_samples: int = 12000,
    n_test: int = 2000,
    seed: int = 0,
) -> Dataset:
    """make_classification(n_features=40, n_informative=20, n_redundant=5, n_classes=10,
    n_clusters_per_class=2, class_sep=1.0, flip_y=0.02, random_state=seed), each feature
    standardised, shuffled; the first n_test samples are the test set."""
    import numpy as np
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=n_samples, n_features=40, n_informative=20, n_redundant=5, n_classes=10,
        n_clusters_per_class=2, class_sep=1.0, flip_y=0.02, random_state=seed,
    )
    x = (x - x.mean(0)) / x.std(0)
    order = np.random.default_rng(seed).permutation(n_samples)
    x = torch.tensor(x[order], dtype=torch.float32)
    y = torch.tensor(y[order], dtype=torch.int64)
    return Dataset(x[n_test:], y[n_test:], x[:n_test], y[:n_test], num_classes=10, name="proxy_synth")
