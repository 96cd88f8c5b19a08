"""Partitions: disjoint and covering, their defining label properties, fingerprints."""

from __future__ import annotations

import numpy as np
import pytest

from fedbench.data import fingerprint, make_partition
from fedbench.core.errors import ConfigError

LABELS = np.repeat(np.arange(10), 200)  # 2,000 samples, 10 classes


@pytest.mark.parametrize("name,params", [
    ("iid", {}), ("dirichlet", {"alpha": 0.3}), ("shards", {"shards_per_client": 2}), ("label_sorted", {}),
])
def test_disjoint_and_covering(name, params):
    parts = make_partition(name, LABELS, 20, seed=0, **params)
    allidx = np.concatenate(parts)
    assert len(allidx) == len(LABELS)
    assert len(np.unique(allidx)) == len(LABELS)


@pytest.mark.parametrize("s,n", [(1, 20), (2, 25), (2, 50), (4, 25)])
def test_shards_give_at_most_s_labels(s, n):
    # shard sizes divide the class sizes here, so no shard straddles two labels
    parts = make_partition("shards", LABELS, n, seed=1, shards_per_client=s)
    assert max(len(np.unique(LABELS[p])) for p in parts) <= s
    assert sum(len(np.unique(LABELS[p])) < s for p in parts) < n  # most clients do get s labels


def test_label_sorted_clients_hold_contiguous_labels():
    parts = make_partition("label_sorted", LABELS, 10, seed=0)
    assert all(len(np.unique(LABELS[p])) == 1 for p in parts)


def test_dirichlet_matches_alpha_statistically():
    # For per-class proportions p ~ Dir(alpha 1_N): E[sum_i p_i^2] = (alpha + 1) / (N alpha + 1).
    labels = np.repeat(np.arange(10), 2000)
    n = 10
    for alpha in (0.1, 1.0, 10.0):
        conc = []
        for seed in range(10):
            parts = make_partition("dirichlet", labels, n, seed=seed, alpha=alpha, min_size=0)
            counts = np.array([[np.sum(labels[p] == c) for c in range(10)] for p in parts])
            share = counts / counts.sum(0, keepdims=True)
            conc.append((share**2).sum(0).mean())
        expected = (alpha + 1) / (n * alpha + 1)
        assert abs(np.mean(conc) - expected) < 0.25 * expected, (alpha, np.mean(conc), expected)


def test_same_seed_same_fingerprint():
    a = fingerprint(make_partition("dirichlet", LABELS, 20, seed=5, alpha=0.5))
    b = fingerprint(make_partition("dirichlet", LABELS, 20, seed=5, alpha=0.5))
    c = fingerprint(make_partition("dirichlet", LABELS, 20, seed=6, alpha=0.5))
    assert a == b != c


def test_bad_partition_values():
    with pytest.raises(ConfigError, match="alpha"):
        make_partition("dirichlet", LABELS, 20, seed=0, alpha=0.0)
    with pytest.raises(ConfigError, match="exceeds"):
        make_partition("shards", LABELS, 1500, seed=0, shards_per_client=2)
    with pytest.raises(ConfigError, match="Unknown partition"):
        make_partition("dirichelt", LABELS, 20, seed=0)
