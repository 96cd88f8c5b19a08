"""What a client sees during a round: its minibatches, gradients, full local gradients, blocks.

`LocalWork` is the `ctx` of DESIGN.md's `local_train(view, ctx)`: the engine builds one per chunk
of the cohort; an algorithm's client update only ever calls it with [s, d] tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from fedbench.engine.executors import GradFn
from fedbench.engine.streams import TAG_ALGO, TAG_AUGMENT, TAG_BLOCK, TAG_SHUFFLE, hash_keys, uniform

_PAD_KEY = 2**40  # sorts padding positions after every real sample


@dataclass
class ClientData:
    """Training data of all N clients, held on the device.

    index[i, :size[i]] are client i's sample indices into x/y; the rest is padding (0).
    """

    x: Tensor
    y: Tensor
    index: Tensor  # [N, n_max] int64
    size: Tensor  # [N] int64
    seed: int
    grad_fn: GradFn
    loss_scale: str = "mean"  # 'mean': f_i = mean loss; 'sum': f_i = sum of losses (LoSAC eq. 6)
    # training augmentation of minibatches: (x [s, B, ...], per-sample keys [s, B]) -> x
    transform: Callable[[Tensor, Tensor], Tensor] | None = None
    _blocks: dict[int, tuple[Tensor, Tensor]] = field(default_factory=dict)

    @classmethod
    def from_partition(cls, x, y, parts, seed, grad_fn, loss_scale="mean", transform=None) -> ClientData:
        sizes = torch.tensor([len(p) for p in parts], dtype=torch.int64)
        index = torch.zeros(len(parts), int(sizes.max()), dtype=torch.int64)
        for i, p in enumerate(parts):
            index[i, : len(p)] = torch.as_tensor(p, dtype=torch.int64)
        return cls(x, y, index.to(x.device), sizes.to(x.device), seed, grad_fn, loss_scale, transform)

    @property
    def num_clients(self) -> int:
        return self.index.shape[0]

    def blocks(self, num_blocks: int) -> tuple[Tensor, Tensor]:
        """LoSAC's M fixed local data blocks: each client's indices shuffled once (seeded) and
        array_split into M parts. Returns (block_index [N, M, b_max], block_size [N, M])."""
        if num_blocks not in self._blocks:
            n_max = self.index.shape[1]
            keys = hash_keys(self.seed, -1, torch.arange(self.num_clients)[:, None], TAG_BLOCK, torch.arange(n_max))
            keys = torch.where(torch.arange(n_max) < self.size.cpu()[:, None], keys, _PAD_KEY)
            shuffled = torch.gather(self.index.cpu(), 1, keys.argsort(dim=1, stable=True))
            sizes = torch.zeros(self.num_clients, num_blocks, dtype=torch.int64)
            b_max = -(-int(self.size.max()) // num_blocks)
            block_index = torch.zeros(self.num_clients, num_blocks, b_max, dtype=torch.int64)
            for i in range(self.num_clients):
                n = int(self.size[i])
                if n < num_blocks:
                    raise ValueError(f"client {i} has {n} samples, fewer than M={num_blocks} blocks")
                for j, piece in enumerate(torch.tensor_split(shuffled[i, :n], num_blocks)):
                    block_index[i, j, : len(piece)] = piece
                    sizes[i, j] = len(piece)
            self._blocks[num_blocks] = (block_index.to(self.x.device), sizes.to(self.x.device))
        return self._blocks[num_blocks]


@dataclass
class Batch:
    """Minibatches of a chunk of clients: x [s, B, ...], y [s, B], per-sample weights w [s, B]."""

    x: Tensor
    y: Tensor
    w: Tensor


@dataclass
class LocalWork:
    """One round's local work of a chunk of s clients.

    Schedule: each client runs `steps[i]` local steps. In epoch mode a step walks through a fresh
    permutation of the client's data each epoch (last batch short); in step mode batches are full
    (drop-last) and the permutation is redrawn after each pass. `batch_size=0` means full batch.
    """

    data: ClientData
    ids: Tensor  # [s] client ids
    round: int
    lr: float
    batch_size: int
    epochs: Tensor | None  # [s] local epochs (epoch mode), or None
    local_steps: int | None  # fixed local steps (step mode), or None
    _perm_cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.sizes = self.data.size[self.ids]  # [s]
        self._index = self.data.index[self.ids]  # [s, n_max]
        B = self.batch_size
        if B <= 0:
            self.per_batch = self.sizes.clone()
            self.steps_per_epoch = torch.ones_like(self.sizes)
        elif self.epochs is not None:
            self.per_batch = torch.full_like(self.sizes, B).minimum(self.sizes)
            self.steps_per_epoch = -(-self.sizes // B)
        else:
            self.per_batch = torch.full_like(self.sizes, B).minimum(self.sizes)
            self.steps_per_epoch = (self.sizes // self.per_batch).clamp(min=1)
        if self.epochs is not None:
            self.steps = self.steps_per_epoch * self.epochs.to(self.sizes.device)
        else:
            self.steps = torch.full_like(self.sizes, int(self.local_steps or 0))
        self.max_steps = int(self.steps.max()) if len(self.steps) else 0
        self._width = int(self.per_batch.max())

    # -- schedule ----------------------------------------------------------------------------
    @property
    def num_clients(self) -> int:
        return len(self.ids)

    def with_epochs(self, epochs: Tensor) -> LocalWork:
        """The same round with per-client epoch counts (system heterogeneity, FedADMM §2.5)."""
        return replace(self, epochs=epochs, local_steps=None, _perm_cache={})

    def with_steps(self, steps: int, batch_size: int | None = None) -> LocalWork:
        bs = self.batch_size if batch_size is None else batch_size
        return replace(self, epochs=None, local_steps=steps, batch_size=bs, _perm_cache={})

    def active(self, t: int) -> Tensor:
        """[s] bool: clients that still take local step t (unequal local work is masked)."""
        return t < self.steps

    # -- data --------------------------------------------------------------------------------
    def _permutation(self, epoch: Tensor) -> Tensor:
        key = tuple(epoch.tolist())
        if key not in self._perm_cache:
            self._perm_cache.clear()
            n_max = self._index.shape[1]
            pos = torch.arange(n_max, device=self.ids.device)
            keys = hash_keys(
                self.data.seed, self.round, self.ids[:, None], TAG_SHUFFLE, epoch[:, None], pos,
                device=self.ids.device,
            )
            keys = torch.where(pos < self.sizes[:, None], keys, _PAD_KEY)
            self._perm_cache[key] = keys.argsort(dim=1, stable=True)
        return self._perm_cache[key]

    def batch(self, t: int) -> Batch:
        """Local step t's minibatch of every client in the chunk (augmented if the data set says so;
        exact gradients, `full_batches` and `block_batch`, never are)."""
        epoch = torch.div(t, self.steps_per_epoch, rounding_mode="floor")
        k = t - epoch * self.steps_per_epoch
        perm = self._permutation(epoch)
        start = k * self.per_batch
        pos = start[:, None] + torch.arange(self._width, device=self.ids.device)
        end = (start + self.per_batch).minimum(self.sizes)
        valid = pos < end[:, None]
        local = torch.gather(perm, 1, pos.clamp(max=perm.shape[1] - 1))
        batch = self._gather(torch.gather(self._index, 1, local), valid)
        if self.data.transform is not None:
            keys = hash_keys(self.data.seed, self.round, self.ids[:, None], TAG_AUGMENT, t, pos, device=self.ids.device)
            batch.x = self.data.transform(batch.x, keys)
        return batch

    def block_batch(self, j: Tensor, num_blocks: int) -> Batch:
        """Block j[s] of each client's M fixed blocks, weighted so that the gradient is
        g_{i,j} = M * grad f_{i,j} (LoSAC §1.4): an unbiased estimate of grad f_i."""
        block_index, block_size = self.data.blocks(num_blocks)
        idx = block_index[self.ids, j]  # [s, b_max]
        size = block_size[self.ids, j]  # [s]
        valid = torch.arange(idx.shape[1], device=idx.device) < size[:, None]
        w = valid * (num_blocks / self._scale_denominator())[:, None]
        return Batch(self.data.x[idx], self.data.y[idx], w.to(self.data.x.dtype))

    def _scale_denominator(self) -> Tensor:
        # f_i = sum of losses ('sum') or mean loss ('mean'): the per-sample weight is 1 or 1/n_i.
        return torch.ones_like(self.sizes, dtype=torch.float64) if self.data.loss_scale == "sum" else self.sizes.double()

    def _gather(self, idx: Tensor, valid: Tensor) -> Batch:
        count = valid.sum(1, keepdim=True).clamp(min=1)
        w = valid.double() / count  # minibatch mean (in float64: exact in float64 runs)
        if self.data.loss_scale == "sum":
            w = w * self.sizes[:, None]
        return Batch(self.data.x[idx], self.data.y[idx], w.to(self.data.x.dtype))

    def full_batches(self, max_batch: int = 4096):
        """The client's whole local data set in pieces, weighted to sum to grad f_i."""
        n_max = self._index.shape[1]
        for start in range(0, n_max, max_batch):
            pos = torch.arange(start, min(start + max_batch, n_max), device=self.ids.device)
            valid = pos[None, :] < self.sizes[:, None]
            w = valid / self._scale_denominator()[:, None]
            idx = self._index[:, start : start + len(pos)]
            yield Batch(self.data.x[idx], self.data.y[idx], w.to(self.data.x.dtype))

    # -- gradients ---------------------------------------------------------------------------
    def grad(self, X: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """(G [s, d], loss [s]): per-client gradients of the weighted minibatch loss at X [s, d]."""
        return self.data.grad_fn(X, batch.x, batch.y, batch.w)

    def full_grad(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Exact local gradient grad f_i(X_i) and loss f_i(X_i) over the client's whole data."""
        G, loss = None, None
        for b in self.full_batches():
            g, l = self.grad(X, b)
            G, loss = (g, l) if G is None else (G + g, loss + l)
        return G, loss

    def uniform(self, *tags: int) -> Tensor:
        """Per-client uniforms in [0, 1) for algorithm-side randomness (e.g. E_i draws)."""
        return uniform(self.data.seed, self.round, self.ids, TAG_ALGO, *tags, device=self.ids.device)

    def randint(self, high: int, *tags: int) -> Tensor:
        """Per-client integers uniform in {0..high-1}."""
        return (self.uniform(*tags) * high).long().clamp(max=high - 1)


def objective_gradient(data: ClientData, x: Tensor, weights: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """(grad f(x), f(x)) of the federated objective f = sum_i weights_i f_i over all clients,
    computed exactly, `chunk` clients at a time."""
    ids = torch.arange(data.num_clients, device=data.size.device)
    G, f = torch.zeros_like(x), x.new_zeros(())
    for start in range(0, len(ids), chunk):
        work = LocalWork(data, ids[start : start + chunk], 0, 0.0, 0, None, 1)
        g, loss = work.full_grad(x.expand(work.num_clients, -1))
        p = weights[start : start + chunk].to(x.dtype)
        G, f = G + p @ g, f + p @ loss
    return G, f
