"""The papers' partitions, each on its defining property (labels only, no data files)."""

from __future__ import annotations

import numpy as np
import pytest

from fedbench.data import fingerprint, make_partition
from fedbench.data.skews import pfl_separate, pfl_train_test
from fedbench.core.errors import ConfigError

MNIST_TRAIN = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_ALL = [6903, 7877, 6990, 7141, 6824, 6313, 6876, 7293, 6825, 6958]  # train + test, fedsso.md §4.2


def labels_of(counts):
    return np.repeat(np.arange(len(counts)), counts)


def label_counts(labels, part, num_classes=10):
    return np.bincount(labels[part], minlength=num_classes)


def covers_once(parts, n):
    allidx = np.concatenate(parts)
    return len(allidx) == n and len(np.unique(allidx)) == n


@pytest.mark.parametrize("m", [100, 200, 500, 1000])
def test_fedadmm_shards(m):
    # fedadmm.md §4.3: 2m shards of 60,000/(2m); with FMNIST's 6,000 per class every shard is
    # single-label (1 or 2 classes per client); with MNIST's uneven counts at most 4.
    for counts, max_labels in (([6000] * 10, 2), ([5000] * 10, 2), (MNIST_TRAIN, 4)):  # FMNIST, CIFAR-10, MNIST
        labels = labels_of(counts)
        n = len(labels)
        parts = make_partition("shards", labels, m, seed=0, shards_per_client=2)
        assert covers_once(parts, n)
        assert {len(p) for p in parts} == {n // m}
        assert max(np.count_nonzero(label_counts(labels, p)) for p in parts) <= max_labels


@pytest.mark.parametrize("c", [0.0, 0.4, 1.0])
def test_c_noniid_fraction(c):
    # losac.md §4.3: each client holds round(c*n/N) label-sorted samples; c = 1 is the sorted split
    labels = labels_of(MNIST_TRAIN)
    parts = make_partition("c_noniid", labels, 1000, seed=3, c=c)
    assert covers_once(parts, 60000) and {len(p) for p in parts} == {60}
    rng = np.random.default_rng([3, 0x5EED])
    perm = rng.permutation(60000)
    sorted_part = set(perm[int(round((1 - c) * 60000)):].tolist())
    share = np.mean([np.mean([i in sorted_part for i in p]) for p in parts])
    assert share == pytest.approx(c, abs=1e-12)
    distinct = np.mean([np.count_nonzero(label_counts(labels, p)) for p in parts])
    if c == 1.0:
        assert distinct < 1.1  # nearly every client holds one digit
    if c == 0.0:
        assert distinct > 9.0  # 60 IID samples: almost always all ten digits


@pytest.mark.parametrize("counts,mean,stdev", [([6000] * 10, 300, 171.03), ([5000] * 10, 250, 142.527)])
def test_imbalanced_shards_table_vi(counts, mean, stdev):
    labels = labels_of(counts)
    parts = make_partition("imbalanced_shards", labels, 200, seed=0)
    sizes = np.array([len(p) for p in parts])
    assert covers_once(parts, len(labels))
    assert sizes.mean() == mean
    assert sizes.std(ddof=1) == pytest.approx(stdev, abs=5e-3)
    shard = len(labels) // 10000
    assert sorted(sizes // shard) == sorted([g for g in range(1, 100) for _ in range(2)] + [50, 50])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_label_k_gives_exactly_k_labels(k):
    labels = labels_of([200] * 10)
    parts = make_partition("label_k", labels, 20, seed=1, k=k)
    assert all(np.count_nonzero(label_counts(labels, p)) == k for p in parts)
    assert len(np.unique(np.concatenate(parts))) == len(np.concatenate(parts))  # disjoint


def test_composite_mnist_split():
    # composite.md target 20: client k = 3,000 uniform images + every label-k image of the other half
    labels = labels_of(MNIST_TRAIN)
    parts = make_partition("composite_mnist", labels, 10, seed=0)
    assert covers_once(parts, 60000)
    for k, p in enumerate(parts):
        own = label_counts(labels, p)[k]
        assert 0.45 <= own / len(p) <= 0.60
        assert len(p) - own < 3000  # the non-k images all come from the uniform 3,000
    rng = np.random.default_rng([0, 0x5EED])
    uniform = rng.permutation(60000)[:30000]
    rest = np.setdiff1d(np.arange(60000), uniform)
    for k, p in enumerate(parts):
        assert set(np.setdiff1d(p, uniform).tolist()) == set(rest[labels[rest] == k].tolist())
    with pytest.raises(ConfigError, match="num_clients must be 10"):
        make_partition("composite_mnist", labels, 20, seed=0)


PFL_20 = {  # fedsso.md §4.2: the authors' 20-client MNIST split (label: count)
    0: {0: 962, 1: 393, 2: 3867, 6: 136, 8: 142}, 1: {1: 357, 2: 540, 6: 221, 7: 90, 8: 330, 9: 191},
    2: {1: 127, 2: 685, 4: 76, 6: 136, 7: 376, 8: 285, 9: 213}, 3: {1: 257, 4: 388, 5: 3820, 6: 137, 7: 128, 8: 293},
    4: {1: 63, 4: 113, 5: 2493, 6: 357, 7: 80, 8: 277, 9: 199}, 5: {1: 250, 4: 99, 6: 257, 7: 189, 9: 215},
    6: {1: 305, 4: 92, 7: 388, 9: 251}, 7: {1: 182, 6: 271, 7: 90, 8: 2961, 9: 372},
    8: {0: 1075, 1: 156, 4: 296, 6: 252, 8: 408, 9: 209}, 9: {1: 42, 4: 4075, 6: 65, 7: 108, 8: 95},
    10: {1: 3796, 2: 351, 6: 96, 8: 332, 9: 276}, 11: {1: 182, 4: 357, 7: 347, 8: 196, 9: 196},
    12: {1: 360, 2: 436, 6: 154, 7: 417, 8: 317}, 13: {1: 109, 2: 84, 7: 3752, 8: 128, 9: 202},
    14: {0: 350, 1: 282, 2: 133, 3: 7141, 4: 415, 6: 50, 7: 367, 8: 200, 9: 340},
    15: {0: 1020, 2: 535, 6: 3642, 7: 429, 9: 286}, 16: {1: 256, 2: 94, 4: 86, 6: 318, 8: 270},
    17: {1: 358, 2: 265, 4: 319, 6: 223, 7: 279, 8: 269, 9: 224}, 18: {0: 830, 1: 48, 6: 380, 7: 175, 8: 322, 9: 3690},
    19: {0: 2666, 1: 354, 4: 508, 6: 181, 7: 78, 9: 94},
}
PFL_TEST = {  # authors' client test splits: first 12 labels and label counts
    1: ("281716212996", {1: 89, 2: 135, 6: 55, 7: 23, 8: 83, 9: 48}),
    5: ("691666991794", {1: 63, 4: 25, 6: 64, 7: 47, 9: 54}),
    8: ("806064800416", {0: 269, 1: 39, 4: 74, 6: 63, 8: 102, 9: 52}),
    16: ("841662161186", {1: 64, 2: 24, 4: 21, 6: 79, 8: 68}),
}
TABLE_3 = [{1: 1298, 5: 6313, 8: 4038, 9: 3396}, {0: 580, 7: 7293, 8: 2787},
           {0: 6323, 1: 6579, 2: 6990, 3: 7141, 4: 6824, 6: 6876, 9: 3562}]


def as_dict(labels, part):
    c = label_counts(labels, part)
    return {int(k): int(c[k]) for k in np.flatnonzero(c)}


def test_pfl_generator_reproduces_the_authors_mnist_split():
    labels = labels_of(MNIST_ALL)
    rs = np.random.RandomState(1)
    parts = pfl_separate(labels, 20, rs)
    assert [as_dict(labels, p) for p in parts] == [PFL_20[i] for i in range(20)]
    train, test = pfl_train_test(parts, labels, rs, 0.75)
    assert sum(map(len, train)) == 52493 and sum(map(len, test)) == 17507
    for i, (first, counts) in PFL_TEST.items():
        assert "".join(map(str, labels[test[i][:12]])) == first
        assert as_dict(labels, test[i]) == counts
    # the registered partition with the authors' seed is the same split
    assert [as_dict(labels, p) for p in make_partition("pfl_noniid", labels, 20, seed=7, rng_seed=1)] == \
        [PFL_20[i] for i in range(20)]
    kept = make_partition("pfl_noniid", labels, 20, seed=7, rng_seed=1, train_size=0.75)
    assert [sorted(p.tolist()) for p in kept] == [sorted(p.tolist()) for p in train]


def test_pfl_generator_reproduces_table_3_and_the_fmnist_check():
    assert [as_dict(labels_of(MNIST_ALL), p) for p in pfl_separate(labels_of(MNIST_ALL), 3, np.random.RandomState(1))] \
        == TABLE_3
    fm = labels_of([7000] * 10)
    assert [as_dict(fm, p) for p in pfl_separate(fm, 3, np.random.RandomState(1))] == [
        {1: 1255, 5: 7000, 8: 4204, 9: 3399}, {0: 585, 7: 7000, 8: 2796},
        {0: 6415, 1: 5745, 2: 7000, 3: 7000, 4: 7000, 6: 7000, 9: 3601}]


def test_quantity_skew_sizes_are_lognormal():
    labels = labels_of([1000] * 10)
    parts = make_partition("quantity_skew", labels, 50, seed=2, sigma=1.0, min_size=5)
    sizes = np.array([len(p) for p in parts])
    assert covers_once(parts, 10000) and sizes.min() >= 5
    assert 0.6 < np.log(sizes - 4).std() < 1.4  # log-sizes spread ~ sigma
    flat = make_partition("quantity_skew", labels, 50, seed=2, sigma=0.0)
    assert {len(p) for p in flat} == {200}


def test_dirichlet_balanced_sizes_and_concentration():
    # every client has n/N samples; per-client label shares ~ Dir(alpha 1_C): E sum_c p_c^2 = (a+1)/(Ca+1)
    labels = labels_of([500] * 10)
    for alpha in (0.3, 0.6, 5.0):
        parts = make_partition("dirichlet_balanced", labels, 50, seed=4, alpha=alpha)
        assert {len(p) for p in parts} == {100}
        share = np.array([label_counts(labels, p) for p in parts]) / 100
        expected = (alpha + 1) / (10 * alpha + 1)
        assert abs((share**2).sum(1).mean() - expected) < 0.2 * expected + 0.01, alpha


def test_iid_stratified_is_balanced_per_class():
    labels = labels_of([50] * 100)  # CIFAR-100 shaped: 5 per class per client for 10 clients
    parts = make_partition("iid_stratified", labels, 10, seed=0, )
    assert covers_once(parts, 5000)
    assert all((label_counts(labels, p, 100) == 5).all() for p in parts)
    uneven = make_partition("iid_stratified", labels_of([7, 9, 13]), 4, seed=0)
    assert max(map(len, uneven)) - min(map(len, uneven)) <= 1


@pytest.mark.parametrize("name,params", [
    ("c_noniid", {"c": 0.3}), ("imbalanced_shards", {"num_shards": 1000}), ("label_k", {"k": 2}),
    ("quantity_skew", {}), ("dirichlet_balanced", {}), ("iid_stratified", {}), ("pfl_noniid", {}),
])
def test_same_seed_same_split(name, params):
    labels = labels_of([300] * 10)
    a = fingerprint(make_partition(name, labels, 20, seed=5, **params))
    b = fingerprint(make_partition(name, labels, 20, seed=5, **params))
    c = fingerprint(make_partition(name, labels, 20, seed=6, **params))
    assert a == b != c


@pytest.mark.parametrize("name,params,match", [
    ("c_noniid", {"c": 1.5}, "partition.c"), ("imbalanced_shards", {"num_shards": 50}, "num_shards"),
    ("label_k", {"k": 11}, "partition.k"), ("dirichlet_balanced", {"alpha": 0}, "alpha"),
    ("quantity_skew", {"sigma": -1}, "sigma"), ("pfl_noniid", {"train_size": 0}, "train_size"),
])
def test_bad_values(name, params, match):
    with pytest.raises(ConfigError, match=match):
        make_partition(name, labels_of([300] * 10), 20, seed=0, **params)
