"""FedProx Synthetic at any population size (issue 35): the sequential generator is today's to the
bit (closed-form covariance instead of an SVD per user), the per_user one makes any user alone."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from fedbench.data import DATASETS
from fedbench.data.synthetic import PerUserSynthetic, eval_users, feature_scale, sequential_users

synthetic = DATASETS.get("synthetic")


def _fingerprint(ds) -> str:
    h = hashlib.sha256()
    for t in (ds.x_train, ds.y_train, ds.x_test, ds.y_test, ds.train_owner):
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


# sha256 of (x_train, y_train, x_test, y_test, train_owner) made by the generator before issue 35
# (commit ca3db5d: numpy's multivariate_normal, i.e. one SVD of the covariance per user)
OLD_FINGERPRINTS = [
    (dict(num_users=50), "b720d38089e61d84"),
    (dict(num_users=50, seed=3, alpha=0.5, beta=0.5), "45220176f3aee7ab"),
    (dict(num_users=20, iid=True, seed=1), "74ed876de4b21343"),
]


@pytest.mark.parametrize("kwargs,expected", OLD_FINGERPRINTS)
def test_sequential_generator_makes_the_old_data_bit_for_bit(kwargs, expected):
    assert _fingerprint(synthetic(**kwargs, eval_users=0)) == expected


def _old_generator(num_users, seed, dim=60, num_classes=10, alpha=1.0, beta=1.0, test_fraction=0.2):
    """The generator before issue 35, verbatim (multivariate_normal: an SVD per user)."""
    rng = np.random.default_rng(seed)
    sizes = (rng.lognormal(4, 2, num_users).astype(int) + 50).clip(max=2000)
    cov = np.diag(np.arange(1, dim + 1, dtype=float) ** -1.2)
    rng.normal(0, 1, (num_classes, dim)), rng.normal(0, 1, num_classes)
    out = []
    for k in range(num_users):
        u, big_b = rng.normal(0, alpha), rng.normal(0, beta)
        w, b = rng.normal(u, 1, (num_classes, dim)), rng.normal(u, 1, num_classes)
        v = rng.normal(big_b, 1, dim)
        x = rng.multivariate_normal(v, cov, sizes[k])
        out.append((x, np.argmax(x @ w.T + b, axis=1)))
    return sizes, out


def test_closed_form_covariance_equals_the_svd_per_user():
    sizes, old = _old_generator(6, seed=11)
    new_sizes, users = sequential_users(11, 6, 60, 10, 1.0, 1.0, iid=False)
    assert np.array_equal(sizes, new_sizes)
    for (x_old, y_old), (x, y) in zip(old, users):
        assert np.array_equal(x_old, x) and np.array_equal(y_old, y)
    assert np.array_equal(feature_scale(3), np.sqrt(np.arange(1, 4, dtype=float) ** -1.2))


def test_per_user_user_is_a_function_of_seed_and_index_alone():
    small = PerUserSynthetic(4, 50, 60, 10, 1.0, 1.0, False)
    huge = PerUserSynthetic(4, 1_000_000, 60, 10, 1.0, 1.0, False)
    assert np.array_equal(small.sizes, huge.sizes[:50])
    late = [small.user(k) for k in (37, 3)]  # any order, any population size
    for k, (x, y) in zip((37, 3), late):
        x2, y2 = huge.user(k)
        assert np.array_equal(x, x2) and np.array_equal(y, y2) and len(x) == small.sizes[k]
    other = PerUserSynthetic(5, 50, 60, 10, 1.0, 1.0, False)
    assert not np.array_equal(other.user(3)[0], late[1][0])


def test_per_user_has_the_sequential_distribution():
    """Same law, other draws: sizes floor(lognormal(4, 2)) + 50 clipped at 2,000, features N(v_k, j^-1.2)."""
    n = 20_000
    seq_sizes, _ = sequential_users(0, n, 60, 10, 1.0, 1.0, iid=False)
    per = PerUserSynthetic(0, n, 60, 10, 1.0, 1.0, False).sizes
    for sizes in (seq_sizes, per):
        assert sizes.min() >= 50 and sizes.max() <= 2000
    # quantiles of the size law agree within sampling error (n = 20,000: ~1% of a quantile's rank)
    for q in (0.1, 0.25, 0.5, 0.75, 0.9):
        a, b = np.quantile(seq_sizes, q), np.quantile(per, q)
        assert abs(a - b) <= 0.06 * a, (q, a, b)
    gen = PerUserSynthetic(0, 200, 60, 10, 1.0, 1.0, True)  # iid: v = 0, so x's variance is j^-1.2
    x = np.concatenate([gen.user(k)[0] for k in range(200)])
    np.testing.assert_allclose(x.var(0), np.arange(1, 61) ** -1.2, rtol=0.08)


def test_eval_users_a_fixed_sample_or_all(monkeypatch):
    assert np.array_equal(eval_users(0, 500, 1000), np.arange(500))
    assert np.array_equal(eval_users(0, 500, 0), np.arange(500))
    sample = eval_users(0, 1_000_000, 1000)
    assert len(np.unique(sample)) == 1000 and np.array_equal(sample, eval_users(0, 1_000_000, 1000))
    full = synthetic(num_users=30, eval_users=0)
    part = synthetic(num_users=30, eval_users=5)
    assert torch.equal(full.x_train, part.x_train) and len(part.y_test) < len(full.y_test)
    made = []
    user = PerUserSynthetic.user
    monkeypatch.setattr(PerUserSynthetic, "user", lambda self, k: made.append(k) or user(self, k))
    lazy = synthetic(num_users=100_000, eval_users=5, generator="per_user")
    assert made == sorted(eval_users(0, 100_000, 5).tolist())  # set-up makes the 5 test users only
    assert len(lazy.y_train) == 0 and lazy.population.num_clients == 100_000 and lazy.population.made == 0
    n_test = np.maximum(1, np.round(0.2 * PerUserSynthetic(0, 100_000, 60, 10, 1.0, 1.0, False).sizes[made]))
    assert len(lazy.y_test) == n_test.sum()


def test_natural_partition_is_one_sort_with_the_per_user_scan_result():
    """Users' samples in increasing order, users by id, as np.flatnonzero(owner == u) for each u."""
    from fedbench.data.partitions import natural_partition

    owner = np.random.default_rng(0).integers(0, 300, 20_000)
    parts = natural_partition(np.zeros(len(owner)), 300, np.random.default_rng(), owner=owner)
    expected = [np.flatnonzero(owner == u) for u in np.unique(owner)]
    assert len(parts) == len(expected) and all(np.array_equal(a, b) for a, b in zip(parts, expected))


def test_runs_from_before_the_generator_option_keep_their_config_hash():
    """A checkpoint of a synthetic run written before dataset.generator/eval_users existed still resumes:
    the defaults that reproduce the old data and test set do not enter the hash; other values do."""
    from omegaconf import OmegaConf

    from fedbench.runs.single import config_hash
    from tests.conftest import make_cfg

    new = make_cfg("dataset=synthetic", "partition=natural", "num_clients=30")
    old = OmegaConf.to_container(new)
    del old["dataset"]["generator"], old["dataset"]["eval_users"]
    assert config_hash(new) == config_hash(OmegaConf.create(old))
    for change in ("dataset.generator=per_user", "dataset.eval_users=10"):
        assert config_hash(make_cfg("dataset=synthetic", "partition=natural", "num_clients=30", change)) != config_hash(new)


def test_auto_is_the_sequential_generator_where_it_fits_and_per_user_beyond():
    """dataset.generator=auto (the default): today's data and config hash up to AUTO_SEQUENTIAL_USERS
    users, so no earlier result changes; a made-on-demand population beyond, so the issue's
    `dataset.num_users=1000000` command runs without naming a generator."""
    from fedbench.data.synthetic import AUTO_SEQUENTIAL_USERS, resolve_generator
    from fedbench.runs.build import check_setup_fits
    from fedbench.runs.single import config_hash
    from tests.conftest import make_cfg

    auto, seq = synthetic(num_users=12, seed=3), synthetic(num_users=12, seed=3, generator="sequential")
    assert auto.population is None and torch.equal(auto.x_train, seq.x_train) and torch.equal(auto.y_test, seq.y_test)
    assert resolve_generator("auto", AUTO_SEQUENTIAL_USERS) == "sequential"
    assert resolve_generator("auto", AUTO_SEQUENTIAL_USERS + 1) == "per_user"
    assert synthetic(num_users=AUTO_SEQUENTIAL_USERS + 1, eval_users=5).population is not None
    small = ("dataset=synthetic", "partition=natural", "num_clients=30")
    assert config_hash(make_cfg(*small)) == config_hash(make_cfg(*small, "dataset.generator=sequential"))
    huge = ("dataset=synthetic", "partition=natural", "dataset.num_users=1000000", "num_clients=1000000")
    check_setup_fits(make_cfg(*huge))  # auto: made on demand, nothing to hold
    assert config_hash(make_cfg(*huge)) == config_hash(make_cfg(*huge, "dataset.generator=per_user"))


def test_a_population_whose_set_up_cannot_fit_is_refused_before_it_is_made(monkeypatch):
    """Issue 42 §5: dataset.num_users=10^9 allocated 9 GB of per-user sizes at set-up and died in a
    traceback; the set-up's estimate (per user, and per evaluated user) is checked against the memory
    available first."""
    import fedbench.core.memory as memory
    from fedbench.core.errors import ConfigError
    from fedbench.runs.build import build_federation
    from tests.conftest import make_cfg

    users = ("dataset=synthetic", "partition=natural", "dataset.num_users=2000000", "num_clients=2000000",
             "dataset.eval_users=10")
    monkeypatch.setattr(memory, "available_bytes", lambda device: 100 * 2**20)  # it takes 130-150 MB
    with pytest.raises(ConfigError, match=r"^dataset.num_users=2000000 with dataset.eval_users=10 holds each user's "
                                          r"size and weight and 10 users' test data \(~0.2 GiB, more than this machine "
                                          r"has available\); choose fewer users"):
        build_federation(make_cfg(*users))
