"""The papers' heterogeneous partitions (label skew, quantity skew, mixtures), registered by name.

Each takes the training labels, the number of clients and a seeded `np.random.Generator`;
the same seed gives the same split (`fingerprint`). Section numbers refer to
/work/shared/papers/<paper>.md.
"""

from __future__ import annotations

import numpy as np

from fedbench.data.partitions import PARTITIONS
from fedbench.core.errors import check


def _sorted_by_label(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices sorted by label, in random order inside each label (a seeded stable sort)."""
    perm = rng.permutation(len(labels))
    return perm[np.argsort(labels[perm], kind="stable")]


@PARTITIONS.register("c_noniid", "LoSAC Fig. 2: (1-c) of the data IID, the other c label-sorted, to every client")
def c_noniid_partition(labels: np.ndarray, num_clients: int, rng: np.random.Generator, c: float = 0.5) -> list[np.ndarray]:
    """losac.md §4.3: c = 0 is IID, c = 1 the label-sorted (non-IID) split; each client gets its
    share of both parts (client i: the i-th IID chunk and the i-th label-sorted chunk)."""
    check(0.0 <= c <= 1.0, f"partition.c must be in [0, 1], got {c}")
    perm = rng.permutation(len(labels))
    k = int(round((1.0 - c) * len(labels)))
    rest = perm[k:]
    rest = rest[np.argsort(labels[rest], kind="stable")]
    iid, skewed = np.array_split(perm[:k], num_clients), np.array_split(rest, num_clients)
    return [np.sort(np.concatenate([a, b])) for a, b in zip(iid, skewed)]


@PARTITIONS.register("imbalanced_shards", "FedADMM Table VI: label-sorted shards, client pairs get 1,1,2,2,...,G-1,G-1 shards")
def imbalanced_shards_partition(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_shards: int = 10000
) -> list[np.ndarray]:
    """fedadmm.md §4.3: sort by label, cut into `num_shards` shards; clients form G = N/2 pairs,
    pair g = 1..G-1 gets g shards per member, the last pair shares the remaining shards equally.
    Shards are handed out at random (A9). N = 200 on FMNIST: mean 300, sample stdev 171.03."""
    check(num_clients % 2 == 0, f"imbalanced_shards pairs clients: num_clients must be even, got {num_clients}")
    groups = num_clients // 2
    used = groups * (groups - 1)  # 2 * (1 + ... + G-1)
    check(
        num_shards >= used + 2 and num_shards <= len(labels),
        f"imbalanced_shards: {num_clients} clients need {used + 2} <= partition.num_shards <= {len(labels)}, "
        f"got {num_shards}",
    )
    shards = np.array_split(_sorted_by_label(labels, rng), num_shards)
    last = (num_shards - used) // 2
    counts = [g for g in range(1, groups) for _ in range(2)] + [last, num_shards - used - last]
    order = rng.permutation(num_shards)
    cuts = np.cumsum(counts)[:-1]
    return [np.sort(np.concatenate([shards[s] for s in row])) for row in np.split(order, cuts)]


@PARTITIONS.register("label_k", "#C = k: every client holds exactly k labels, each label split evenly among its holders")
def label_k_partition(labels: np.ndarray, num_clients: int, rng: np.random.Generator, k: int = 2) -> list[np.ndarray]:
    """Client i holds label i mod K and k-1 further distinct labels drawn uniformly (Li et al. 2022,
    'Federated learning on non-IID data silos'); each label's samples are split evenly among the
    clients holding it (labels nobody holds are unused)."""
    classes = np.unique(labels)
    check(1 <= k <= len(classes), f"partition.k must be in [1, {len(classes)}], got {k}")
    held = []
    for i in range(num_clients):
        own = i % len(classes)
        others = rng.permutation(np.delete(np.arange(len(classes)), own))[: k - 1]
        held.append([own, *others.tolist()])
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for j, c in enumerate(classes):
        holders = [i for i in range(num_clients) if j in held[i]]
        if holders:
            for i, piece in zip(holders, np.array_split(rng.permutation(np.flatnonzero(labels == c)), len(holders))):
                parts[i].append(piece)
    return [np.sort(np.concatenate(p)) for p in parts]


@PARTITIONS.register("composite_mnist", "composite FL §4.2: half uniform, the other half by label (client k gets label k)")
def composite_mnist_partition(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, uniform_fraction: float = 0.5
) -> list[np.ndarray]:
    """composite.md §4.2: 30,000 of MNIST's 60,000 images uniformly at random, 3,000 to each of
    the 10 clients; every remaining image of label k goes to client k."""
    classes = np.unique(labels)
    check(num_clients == len(classes), f"composite_mnist gives client k label k: num_clients must be {len(classes)}")
    check(0.0 <= uniform_fraction <= 1.0, f"partition.uniform_fraction must be in [0, 1], got {uniform_fraction}")
    perm = rng.permutation(len(labels))
    per_client = int(uniform_fraction * len(labels)) // num_clients
    uniform = np.split(perm[: per_client * num_clients], num_clients)
    rest = perm[per_client * num_clients :]
    return [np.sort(np.concatenate([uniform[k], rest[labels[rest] == c]])) for k, c in enumerate(classes)]


@PARTITIONS.register("quantity_skew", "IID labels, log-normal client sizes n_i ~ exp(N(0, sigma^2)) (quantity skew)")
def quantity_skew_partition(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, sigma: float = 1.0, min_size: int = 1
) -> list[np.ndarray]:
    """Shares q_i proportional to log-normal draws; client i gets ~q_i * n shuffled samples (at least `min_size`)."""
    check(sigma >= 0, f"partition.sigma must be >= 0, got {sigma}")
    check(min_size * num_clients <= len(labels),
          f"partition.min_size={min_size} x {num_clients} clients exceeds {len(labels)} samples")
    share = rng.lognormal(0.0, sigma, num_clients)
    extra = len(labels) - min_size * num_clients
    sizes = min_size + np.floor(share / share.sum() * extra).astype(int)
    sizes[np.argmax(share)] += len(labels) - sizes.sum()  # rounding remainder to the largest client
    return [np.sort(p) for p in np.split(rng.permutation(len(labels)), np.cumsum(sizes)[:-1])]


@PARTITIONS.register("dirichlet_balanced", "FedSpeed: equal sizes, per-client label priors ~ Dir(alpha), classes refilled")
def dirichlet_balanced_partition(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, alpha: float = 0.6
) -> list[np.ndarray]:
    """fedspeed.md §4.3 (the official code, FedDyn's generator): every client draws its label prior
    from Dir(alpha 1_C) and then fills its n/N slots one sample at a time from a random client's
    categorical draw; an exhausted class is refilled, so some samples repeat and some go unused.
    Unlike `dirichlet` (per-class proportions over clients) the sizes are exactly balanced."""
    check(alpha > 0, f"partition.alpha must be > 0, got {alpha}")
    perm = rng.permutation(len(labels))  # the code permutes the training set once first
    classes = np.unique(labels)
    pools = [perm[labels[perm] == c] for c in classes]
    remaining = np.array([len(p) for p in pools])
    cap = np.full(num_clients, len(labels) // num_clients)
    cap[0] += len(labels) - cap.sum()  # the remainder goes to client 0, as in the code
    cum = np.cumsum(rng.dirichlet(np.full(len(classes), alpha), num_clients), axis=1)
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    while cap.sum() > 0:
        j = int(rng.integers(num_clients))
        if cap[j] == 0:
            continue
        cap[j] -= 1
        while True:
            c = int(np.argmax(rng.random() <= cum[j]))
            if remaining[c] == 0:
                remaining[c] = len(pools[c])
                continue
            remaining[c] -= 1
            parts[j].append(int(pools[c][remaining[c]]))
            break
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


@PARTITIONS.register("iid_stratified", "every client gets the same number (up to one) of samples of every class")
def iid_stratified_partition(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """FedSpeed's CIFAR-100 IID split (fedspeed.md §4.3): each class is divided evenly over the
    clients; the client that gets a class's larger pieces rotates so that sizes stay balanced."""
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    offset = 0
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        for j, piece in enumerate(np.array_split(idx, num_clients)):
            parts[(j + offset) % num_clients].append(piece)
        offset += len(idx) % num_clients
    return [np.sort(np.concatenate(p)) for p in parts]


# -- PFL-Non-IID (FedSSO) --------------------------------------------------------------------


def pfl_separate(
    labels: np.ndarray, num_clients: int, rs: np.random.RandomState, least_samples: float = 16
) -> list[np.ndarray]:
    """fedsso.md §4.2: PFL-Non-IID `separate_data(niid=True, real=True)`, draw for draw on the
    legacy RandomState. Label l goes to a random 1..N-1 clients in consecutive slices of the
    samples of label l (in data order), slice sizes uniform in [max(n/10, least_samples), n)."""
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    clients = list(range(num_clients))
    for label in np.unique(labels):
        idx = np.flatnonzero(labels == label)
        n_sel = rs.randint(1, len(clients))
        num_per = len(idx) / n_sel
        check(int(max(num_per / 10, least_samples)) < int(num_per),  # randint(low, high) of their integer parts
              f"pfl_noniid: partition.least_samples={least_samples:g} is not below the {num_per:.0f} samples of label "
              f"{label} that each of its {n_sel} clients shares: use a smaller least_samples")
        sizes = rs.randint(max(num_per / 10, least_samples), num_per, n_sel - 1).tolist()
        sizes.append(len(idx) - sum(sizes))
        chosen = list(rs.choice(clients, n_sel, replace=False))
        start = 0
        for client, n in zip(chosen, sizes):
            parts[client].append(idx[start : start + n])
            start += n
    return [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in parts]


def pfl_train_test(
    parts: list[np.ndarray], labels: np.ndarray, rs: np.random.RandomState, train_size: float = 0.75
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The per-client train/test split that follows `pfl_separate` on the same RandomState
    (sklearn `train_test_split`, stratified unless a label occurs once)."""
    from sklearn.model_selection import train_test_split

    train, test = [], []
    for i, p in enumerate(parts):
        check(len(p) >= 2, f"pfl_noniid: client {i} got {len(p)} samples, too few to split; use fewer clients")
        _, counts = np.unique(labels[p], return_counts=True)
        tr, te = train_test_split(
            p, train_size=train_size, shuffle=True, random_state=rs, stratify=labels[p] if counts.min() > 1 else None
        )
        train.append(tr), test.append(te)
    return train, test


@PARTITIONS.register("pfl_noniid", "FedSSO / PFL-Non-IID generator: each label to a random 1..N-1 clients, random slice sizes")
def pfl_noniid_partition(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    least_samples: float = 16,
    train_size: float = 1.0,
    rng_seed: int | None = None,
) -> list[np.ndarray]:
    """fedsso.md §4.2. `rng_seed=1` replays the authors' generator (np.random.seed(1)) exactly;
    null derives the RandomState from the run seed. `train_size < 1` keeps only the training part
    of each client's train/test split (the authors split 0.75/0.25 after pooling MNIST's train and
    test sets; their client test sets are not built here)."""
    check(num_clients >= 2, f"pfl_noniid needs at least 2 clients, got {num_clients}")
    check(0.0 < train_size <= 1.0, f"partition.train_size must be in (0, 1], got {train_size}")
    seed = int(rng.integers(2**31)) if rng_seed is None else int(rng_seed)
    rs = np.random.RandomState(seed)
    parts = pfl_separate(labels, num_clients, rs, least_samples)
    if train_size < 1.0:
        parts, _ = pfl_train_test(parts, labels, rs, train_size)
    return [np.sort(p) for p in parts]
