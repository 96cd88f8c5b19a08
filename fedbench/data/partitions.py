"""Partitioners: labels -> one index array per client. Same seed, same split."""

from __future__ import annotations

import hashlib

import numpy as np

from fedbench.core.errors import ConfigError, check
from fedbench.core.origin import qualified_name
from fedbench.core.registry import Registry

PARTITIONS: Registry = Registry("partition", package="fedbench.data")


def fingerprint(parts: list[np.ndarray]) -> str:
    """A short hash of the exact split (client order and per-client index sets)."""
    h = hashlib.sha256()
    for idx in parts:
        h.update(np.sort(np.asarray(idx, dtype=np.int64)).tobytes())
        h.update(b"|")
    return h.hexdigest()[:12]


@PARTITIONS.register("iid", "uniformly shuffled, sizes equal up to one")
def iid_partition(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [np.sort(p) for p in np.array_split(rng.permutation(len(labels)), num_clients)]


@PARTITIONS.register("dirichlet", "per-class proportions ~ Dir(alpha) over clients (Hsu et al. 2019)")
def dirichlet_partition(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_size: int = 2,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Each class is divided among clients by proportions drawn from Dir(alpha * 1_N); the draw
    is repeated until every client holds at least `min_size` samples."""
    check(alpha > 0, f"partition.alpha must be > 0, got {alpha}")
    check(min_size * num_clients <= len(labels), f"partition.min_size={min_size} x {num_clients} clients exceeds {len(labels)} samples")
    classes = np.unique(labels)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha))) * len(idx)).astype(int)[:-1]
            for client, piece in enumerate(np.split(idx, cuts)):
                parts[client].append(piece)
        merged = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in merged) >= min_size:
            return merged
    raise ConfigError(
        f"dirichlet partition: no split with >= {min_size} samples per client after {max_tries} draws "
        f"(alpha={alpha}, {num_clients} clients); raise alpha or lower partition.min_size"
    )


@PARTITIONS.register("shards", "sort by label, cut into shards, s shards per client (McMahan et al.)")
def shards_partition(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, shards_per_client: int = 2
) -> list[np.ndarray]:
    check(shards_per_client >= 1, f"partition.shards_per_client must be >= 1, got {shards_per_client}")
    num_shards = num_clients * shards_per_client
    check(
        num_shards <= len(labels),
        f"shards: {num_clients} clients x {shards_per_client} shards exceeds {len(labels)} samples",
    )
    order = np.lexsort((rng.random(len(labels)), labels))  # by label, random within a label
    shards = np.array_split(order, num_shards)
    assignment = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([shards[s] for s in row])) for row in assignment]


@PARTITIONS.register("label_sorted", "sort by label and divide evenly in that order")
def label_sorted_partition(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = np.lexsort((rng.random(len(labels)), labels))
    return [np.sort(p) for p in np.array_split(order, num_clients)]


@PARTITIONS.register("natural", "the data set's own users (FedProx Synthetic, LEAF)")
def natural_partition(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, owner: np.ndarray | None = None
) -> list[np.ndarray]:
    if owner is None:
        raise ConfigError("partition=natural needs a data set with its own users (synthetic, shakespeare, sent140)")
    order = np.argsort(owner, kind="stable")  # one sort, not a pass over the samples per user (O(N n))
    users, starts = np.unique(owner[order], return_index=True)
    check(
        num_clients == len(users),
        f"partition=natural: the data set has {len(users)} users; set num_clients={len(users)}",
    )
    return np.split(order, starts[1:])  # each user's samples in increasing order, users in increasing id


def make_partition(
    name: str, labels: np.ndarray, num_clients: int, seed: int, owner: np.ndarray | None = None, **params
) -> list[np.ndarray]:
    fn = PARTITIONS.get(name)
    check(num_clients >= 1, f"num_clients must be >= 1, got {num_clients}")
    check(num_clients <= len(labels), f"num_clients={num_clients} exceeds the {len(labels)} training samples")
    rng = np.random.default_rng([seed, 0x5EED])
    if name == "natural":
        params["owner"] = owner
    try:
        parts = fn(np.asarray(labels), num_clients, rng, **params)
    except TypeError as exc:
        raise ConfigError(f"partition {name!r}: {exc}") from None
    made = qualified_name(fn, name)
    check(len(parts) == num_clients,
          f"partition {name!r}: {made} returned {len(parts)} index lists for num_clients={num_clients} (one per client)")
    for i, p in enumerate(parts):
        p = np.asarray(p)
        check(p.ndim == 1 and (p.size == 0 or np.issubdtype(p.dtype, np.integer)),
              f"partition {name!r}: {made} gave client {i} {p.dtype} values of shape {list(p.shape)}, not a list of "
              "sample indices")
        check(p.size == 0 or (p.min() >= 0 and p.max() < len(labels)),
              f"partition {name!r}: {made} gave client {i} indices outside 0..{len(labels) - 1}, the training samples")
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    check(not empty, f"partition {name!r} left clients {empty[:5]} without data; use fewer clients")
    return parts
