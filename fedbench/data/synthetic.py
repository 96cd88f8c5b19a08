"""FedProx Synthetic(alpha, beta) (Li et al., "Federated Optimization in Heterogeneous Networks",
MLSys 2020, §5.1): u_k ~ N(0, alpha), W_k, b_k ~ N(u_k, 1); B_k ~ N(0, beta), v_k ~ N(B_k, 1),
x ~ N(v_k, diag(j^-1.2)); y = argmax(W_k x + b_k); n_k ~ lognormal(4, 2) + 50 (at most 2,000).
Each user's first 20% of samples (at least one) are its test data, the rest its training data.

Two generators of the same distribution:
- `sequential` (fedbench's first, the default): every user drawn in turn from one stream seeded by
  `seed`. User k's draws start where user k-1's ended, and a normal draw consumes a variable
  number of raw bits (ziggurat rejections), so user k cannot be made without making users 0..k-1:
  the population is materialised eagerly.
- `per_user`: user k's draws come from its own stream, seeded by (seed, k), and its size from a
  counter-based hash of (seed, k): any user is made alone, in any order, when it is sampled
  (data.population.Population), so a population of 10^6 users costs nothing until used.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from fedbench.core.errors import check
from fedbench.core.streams import hash_keys

GENERATORS = ("auto", "sequential", "per_user")
AUTO_SEQUENTIAL_USERS = 10_000  # `auto`: the sequential generator up to here (~2.4 GB of data), per_user beyond
MAX_SIZE = 2000
_TAG_SIZE, _TAG_USER, _TAG_SHARED, _TAG_EVAL = 0x517E, 0x05E2, 0x5A2E, 0xE7A1


def feature_scale(dim: int) -> np.ndarray:
    """sqrt of diag(j^-1.2), j = 1..dim. The covariance is diagonal, so x = v + z * scale with z
    standard normal is exactly what numpy's multivariate_normal computes through its SVD (the SVD of
    this diagonal matrix is the identity and the diagonal itself: same numbers, tested)."""
    return np.sqrt(np.arange(1, dim + 1, dtype=float) ** -1.2)


def test_count(size: int | np.ndarray, test_fraction: float):
    """A user's test samples: its first round(test_fraction * n_k), at least one."""
    return np.maximum(1, np.round(test_fraction * np.asarray(size)).astype(np.int64))


def _user(rng: np.random.Generator, size: int, dim: int, num_classes: int, alpha: float, beta: float,
          shared: tuple[np.ndarray, np.ndarray] | None, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One user's (x [n_k, dim], y [n_k]), drawn from `rng` in the order of fedbench's first generator."""
    u, big_b = rng.normal(0, alpha), rng.normal(0, beta)
    w, b = shared if shared is not None else (rng.normal(u, 1, (num_classes, dim)), rng.normal(u, 1, num_classes))
    v = np.zeros(dim) if shared is not None else rng.normal(big_b, 1, dim)
    x = rng.standard_normal((size, dim)) * scale + v
    return x, np.argmax(x @ w.T + b, axis=1)


def sequential_users(seed: int, num_users: int, dim: int, num_classes: int, alpha: float, beta: float, iid: bool,
                     progress: bool = False):
    """(sizes [N], iterator over users' (x, y) in order) of the sequential generator."""
    rng = np.random.default_rng(seed)
    sizes = (rng.lognormal(4, 2, num_users).astype(int) + 50).clip(max=MAX_SIZE)
    w_shared = rng.normal(0, 1, (num_classes, dim))
    b_shared = rng.normal(0, 1, num_classes)
    scale = feature_scale(dim)

    def users():
        ks = range(num_users)
        if progress:
            from tqdm import tqdm

            ks = tqdm(ks, desc="synthetic users", unit="user", mininterval=1.0, leave=False, disable=None)
        for k in ks:
            yield _user(rng, int(sizes[k]), dim, num_classes, alpha, beta, (w_shared, b_shared) if iid else None, scale)

    return sizes, users()


class PerUserSynthetic:
    """The per_user generator: user k is a pure function of (seed, k)."""

    def __init__(self, seed: int, num_users: int, dim: int, num_classes: int, alpha: float, beta: float, iid: bool):
        self.seed, self.num_users, self.dim, self.num_classes = seed, num_users, dim, num_classes
        self.alpha, self.beta, self.iid = alpha, beta, iid
        # n_k = floor(lognormal(4, 2)) + 50 from one hashed uniform per user: [N] in one vectorised pass
        u = (hash_keys(seed, _TAG_SIZE, torch.arange(num_users)).double() + 0.5) / 2.0**32
        self.sizes = ((torch.exp(4 + 2 * torch.special.ndtri(u))).long() + 50).clamp(max=MAX_SIZE).numpy()
        shared = np.random.default_rng([seed, _TAG_SHARED])
        self.shared = (shared.normal(0, 1, (num_classes, dim)), shared.normal(0, 1, num_classes)) if iid else None
        self.scale = feature_scale(dim)
        self.made = 0  # users made so far (tests count them: a round makes its cohort's only)

    def user(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.made += 1
        rng = np.random.default_rng([self.seed, _TAG_USER, k])
        return _user(rng, int(self.sizes[k]), self.dim, self.num_classes, self.alpha, self.beta, self.shared, self.scale)

    def fingerprint(self) -> str:
        """The population's identity without making it: the generator and its parameters."""
        key = f"synthetic/per_user/{self.seed}/{self.num_users}/{self.dim}/{self.num_classes}/{self.alpha!r}/{self.beta!r}/{self.iid}"
        return hashlib.sha256(key.encode()).hexdigest()[:12]


def eval_users(seed: int, num_users: int, count: int) -> np.ndarray:
    """The users whose test data form the test set: all when count is 0 or >= N, else a fixed
    sample of `count` users drawn with `seed` (sorted), the same in every run of that seed."""
    if count <= 0 or count >= num_users:
        return np.arange(num_users)
    return np.sort(np.random.default_rng([seed, _TAG_EVAL]).choice(num_users, count, replace=False))


def check_generator(generator: str) -> None:
    check(generator in GENERATORS, f"dataset.generator={generator!r}: choose one of {', '.join(GENERATORS)}")


def resolve_generator(generator: str, num_users: int) -> str:
    """`auto` is fedbench's first (sequential) generator wherever that one fits in memory, so results at
    those sizes never change, and per_user beyond AUTO_SEQUENTIAL_USERS users (a fixed size, not the
    machine's free memory: the same config makes the same data on every machine)."""
    check_generator(generator)
    if generator != "auto":
        return generator
    return "sequential" if int(num_users) <= AUTO_SEQUENTIAL_USERS else "per_user"
