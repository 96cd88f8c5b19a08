"""What a client sees during a round: its minibatches, gradients, full local gradients, blocks.

`LocalWork` is the `ctx` of DESIGN.md's `local_train(view, ctx)`: the engine builds one per chunk
of the cohort; an algorithm's client update only ever calls it with [s, d] tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from fedbench.core.types import Batch, LocalExtras
from fedbench.engine.gradients import GradFn
from fedbench.core.streams import TAG_ALGO, TAG_AUGMENT, TAG_BLOCK, TAG_SHUFFLE, hash_keys, uniform

_PAD_KEY = 2**40  # sorts padding positions after every real sample
_SCHEDULE_ENTRIES = 1 << 22  # index entries a precomputed block of minibatch steps may hold


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
    # unequal local work: a step computes the gradients of the clients still working only (False:
    # every client of a chunk computes every step and the algorithm's mask discards the extra ones)
    skip_done: bool = True
    _blocks: dict[int, tuple[Tensor, Tensor]] = field(default_factory=dict)
    on_demand = False  # not a field: a population whose clients are made when sampled (LazyClientData)

    @classmethod
    def from_partition(cls, x, y, parts, seed, grad_fn, loss_scale="mean", transform=None) -> ClientData:
        sizes = torch.tensor([len(p) for p in parts], dtype=torch.int64)
        index = torch.zeros(len(parts), int(sizes.max()), dtype=torch.int64)
        for i, p in enumerate(parts):
            index[i, : len(p)] = torch.as_tensor(p, dtype=torch.int64)
        return cls(x, y, index.to(x.device), sizes.to(x.device), seed, grad_fn, loss_scale, transform)

    @property
    def num_clients(self) -> int:
        return len(self.size)

    def rows(self, ids: Tensor) -> Tensor:
        """[s, n_max] sample indices into x/y of clients `ids`."""
        return self.index[ids]

    def prepare(self, ids: list[int]) -> None:
        """Clients `ids` are about to train (a round's cohorts): nothing to do when all are in memory."""

    def prefetch(self, ids: list[int]) -> None:
        """Clients `ids` train next (the next round's cohorts): nothing to do when all are in memory."""

    def blocks(self, num_blocks: int, seed: int | None = None) -> tuple[Tensor, Tensor]:
        """LoSAC's M fixed local data blocks: each client's indices shuffled once (by the run's seed,
        `self.seed` unless given) and array_split into M parts. Returns (block_index [N, M, b_max],
        block_size [N, M])."""
        seed = self.seed if seed is None else seed
        key = num_blocks if seed == self.seed else (num_blocks, seed)
        if key not in self._blocks:
            n_max = self.index.shape[1]
            keys = hash_keys(seed, -1, torch.arange(self.num_clients)[:, None], TAG_BLOCK, torch.arange(n_max))
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
            self._blocks[key] = (block_index.to(self.x.device), sizes.to(self.x.device))
        return self._blocks[key]


@dataclass
class _Schedule:
    """Precomputed minibatches of steps first .. first+len(widths)-1: index/weights [L, s, W]."""

    first: int
    widths: list[int]  # per step: the batch width actually used
    uniform: list[bool]  # per step: every working client has a full batch of `width` samples, mean-scaled
    index: Tensor
    weights: Tensor
    start: Tensor  # [L, s] first position of each step's batch in the client's permutation


def take(t: Tensor, idx: Tensor) -> Tensor:
    """t[idx] for an index tensor of any shape over t's first dimension, by index_select (the same values;
    a minibatch's rows gathered 3x faster than by advanced indexing on a CPU)."""
    return t.index_select(0, idx.reshape(-1)).view(*idx.shape, *t.shape[1:])


def step_schedule(sizes: Tensor, batch_size: int, epochs: Tensor | None, local_steps: int | None
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """(batch size, steps per epoch, local steps) of clients with `sizes` samples: epoch mode when
    `epochs` is given (the last batch of an epoch short), else `local_steps` full batches."""
    B = batch_size
    if B <= 0:
        per_batch, steps_per_epoch = sizes.clone(), torch.ones_like(sizes)
    elif epochs is not None:
        per_batch, steps_per_epoch = torch.full_like(sizes, B).minimum(sizes), -(-sizes // B)
    else:
        per_batch = torch.full_like(sizes, B).minimum(sizes)
        steps_per_epoch = (sizes // per_batch).clamp(min=1)
    if epochs is not None:
        steps = steps_per_epoch * epochs.to(sizes.device)
    else:
        steps = torch.full_like(sizes, int(local_steps or 0))
    return per_batch, steps_per_epoch, steps


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
    lr: float | Tensor  # [s, 1] when lanes of several step sizes share the chunk (Algorithm.lr_rows)
    batch_size: int
    epochs: Tensor | None  # [s] local epochs (epoch mode), or None
    local_steps: int | None  # fixed local steps (step mode), or None
    # [s] each client's run seed when the chunk holds clients of several runs (engine.loop's lanes:
    # a grid trained as one program); None: every client's streams use data.seed
    seeds: Tensor | None = None
    extras: LocalExtras = LocalExtras()  # the run's shared local-step extras (algorithms.common.local_sgd applies them)
    _schedule: _Schedule | None = field(default=None, repr=False)

    def __post_init__(self):
        self.sizes = self.data.size[self.ids]  # [s]
        self._index = self.data.rows(self.ids)  # [s, n_max]
        self.per_batch, self.steps_per_epoch, self.steps = step_schedule(
            self.sizes, self.batch_size, self.epochs, self.local_steps)
        self.max_steps = int(self.steps.max()) if len(self.steps) else 0
        self.min_steps = int(self.steps.min()) if len(self.steps) else 0  # steps all clients take
        # Host copies: each step's batch width is known without a device sync.
        self._host = [v.cpu() for v in (self.sizes, self.per_batch, self.steps_per_epoch, self.steps)]
        self._rows: dict[int, Tensor] = {}  # working clients' rows, by their number

    def _seed(self, dims: int, rows: Tensor | None = None) -> int | Tensor:
        """The seed part of a stream key: data.seed, or the clients' own seeds shaped [s, 1, ...]
        (`dims` dimensions) when the chunk mixes runs; `rows` selects clients."""
        if self.seeds is None:
            return self.data.seed
        seeds = self.seeds if rows is None else self.seeds[rows]
        return seeds.view(-1, *([1] * (dims - 1)))

    # -- schedule ----------------------------------------------------------------------------
    @property
    def num_clients(self) -> int:
        return len(self.ids)

    def with_epochs(self, epochs: Tensor) -> LocalWork:
        """The same round with per-client epoch counts (system heterogeneity, FedADMM §2.5)."""
        return replace(self, epochs=epochs, local_steps=None, _schedule=None)

    def with_steps(self, steps: int, batch_size: int | None = None) -> LocalWork:
        bs = self.batch_size if batch_size is None else batch_size
        return replace(self, epochs=None, local_steps=steps, batch_size=bs, _schedule=None)

    def active(self, t: int) -> Tensor:
        """[s] bool: clients that still take local step t (unequal local work is masked)."""
        return t < self.steps

    def masked(self, t: int, new: Tensor, old: Tensor) -> Tensor:
        """Step t's update `new` [s, ...] for the clients still working, `old` for those done; no
        mask pass while every client still works (t < min_steps)."""
        if t < self.min_steps:
            return new
        return torch.where(self.active(t).view(-1, *([1] * (new.dim() - 1))), new, old)

    # -- data --------------------------------------------------------------------------------
    def batch(self, t: int) -> Batch:
        """Local step t's minibatch of every client in the chunk (augmented if the data set says so;
        exact gradients, `full_batches` and `block_batch`, never are)."""
        block, k, width = self._step(t)
        idx, w, start, ids = block.index[k, :, :width], block.weights[k, :, :width], block.start[k], self.ids
        rows = self._working_rows(t)
        if rows is not None:  # only the clients still working: no compute on finished ones
            idx, w, start, ids = idx[rows], w[rows], start[rows], ids[rows]
        batch = Batch(take(self.data.x, idx), take(self.data.y, idx), w, block.uniform[k], rows)
        if self.data.transform is not None:
            pos = start[:, None] + torch.arange(width, device=self.ids.device)
            keys = hash_keys(self._seed(2, rows), self.round, ids[:, None], TAG_AUGMENT, t, pos, device=self.ids.device)
            batch.x = self.data.transform(batch.x, keys)
        return batch

    def _working_rows(self, t: int) -> Tensor | None:
        """Rows of the clients that take step t once at most half of the chunk does, else None (all
        rows computed, the finished ones masked by the algorithm). Known on the host: no sync."""
        if t < self.min_steps or not self.data.skip_done:
            return None
        working = self._host[3] > t
        count = int(working.sum())
        if 2 * count > len(working):  # gathering and scattering rows costs more than half idle compute
            return None
        if count not in self._rows:  # the working set shrinks with t: its size names it
            self._rows[count] = working.nonzero().squeeze(1).to(self.ids.device)
        return self._rows[count]

    def batch_index(self, t: int) -> Tensor:
        """[s, W] sample indices (into data.x) of step t's minibatches; padding is index 0 with
        weight 0."""
        block, k, width = self._step(t)
        return block.index[k, :, :width]

    def _step(self, t: int) -> tuple[_Schedule, int, int]:
        block = self._schedule
        if block is None or not block.first <= t < block.first + len(block.widths):
            block = self._schedule = self._plan(t)
        return block, t - block.first, block.widths[t - block.first]

    def _plan(self, first: int) -> _Schedule:
        """The minibatch indices and weights of steps first, first+1, ... at once (as many as fit
        _SCHEDULE_ENTRIES), so that a step costs one gather.

        Step t of client i reads positions [k*b_i, min((k+1)*b_i, n_i)) of the epoch-e permutation
        of its data, e = t // steps_per_epoch_i, k = t mod steps_per_epoch_i; the permutation's
        keys are hashes of (seed, round, client, e, position), so any split into blocks, chunks or
        devices draws the same minibatches.
        """
        dev = self.ids.device
        s, n_max = self._index.shape
        count = max(1, min(_SCHEDULE_ENTRIES // max(1, s * n_max), max(self.max_steps - first, 1)))
        # the schedule on the host (no device sync): epoch and first/last position of every step's
        # batch, [count, s]; a step's width is the longest batch among active clients (an epoch's
        # short last batch is not padded to B: padding costs as much compute as data)
        sizes, per_batch, steps_per_epoch, steps = self._host
        T = torch.arange(first, first + count)[:, None]
        # a client done with its steps re-reads its last batch (skipped or masked): no permutations
        # of epochs it never reaches (a 1-step client beside a 100-step one would need 100)
        Tc = T.minimum((steps - 1).clamp(min=0))
        epoch = Tc // steps_per_epoch
        start = (Tc - epoch * steps_per_epoch) * per_batch
        end = (start + per_batch).minimum(sizes)
        widths = (end - start).masked_fill(T >= steps, 0).amax(dim=1).clamp(min=1).tolist() if s else [1] * count
        first_epoch, last_epoch = (int(epoch.min()), int(epoch.max())) if s else (0, 0)
        # positions in each client's permutation, [count, s, W]
        W = max(widths)
        epoch, start, end = epoch.to(dev), start.to(dev), end.to(dev)
        in_width = torch.arange(W, device=dev) < torch.tensor(widths, device=dev)[:, None, None]
        pos = start[..., None] + torch.arange(W, device=dev)
        valid = (pos < end[..., None]) & in_width
        # the permutations of every epoch the block touches, [s, E, n_max]
        epochs = torch.arange(first_epoch, last_epoch + 1, device=dev)
        positions = torch.arange(n_max, device=dev)
        keys = hash_keys(
            self._seed(3), self.round, self.ids[:, None, None], TAG_SHUFFLE, epochs[None, :, None], positions,
            device=dev,
        )
        keys = torch.where(positions < self.sizes[:, None, None], keys, _PAD_KEY)
        perm = keys.argsort(dim=2, stable=True)
        rows = torch.arange(s, device=dev)[None, :, None]
        local = perm[rows, (epoch - first_epoch)[..., None], pos.clamp(max=n_max - 1)]
        weights = valid.to(self.data.x.dtype) / valid.sum(2, keepdim=True).clamp(min=1)  # minibatch mean
        if self.data.loss_scale == "sum":
            weights = weights * self.sizes[:, None]
        done = (T >= steps).to(dev)
        full = ((valid | ~in_width).all(2) | done).all(1)  # every working client fills the step's width
        uniform = [bool(f) and self.data.loss_scale == "mean" for f in full.tolist()]
        return _Schedule(first, widths, uniform, self._index[rows, local], weights.to(self.data.x.dtype), start)

    def block_batch(self, j: Tensor, num_blocks: int) -> Batch:
        """Block j[s] of each client's M fixed blocks, weighted so that the gradient is
        g_{i,j} = M * grad f_{i,j} (LoSAC §1.4): an unbiased estimate of grad f_i."""
        if self.seeds is None:
            block_index, block_size = self.data.blocks(num_blocks)
            idx, size = block_index[self.ids, j], block_size[self.ids, j]  # [s, b_max], [s]
        else:  # each run's own blocks
            pieces = [self.data.blocks(num_blocks, int(seed)) for seed in self.seeds.tolist()]
            b_max = max(bi.shape[2] for bi, _ in pieces)
            idx = torch.stack([F.pad(bi[i, jj], (0, b_max - bi.shape[2])) for (bi, _), i, jj in zip(pieces, self.ids, j)])
            size = torch.stack([bs[i, jj] for (_, bs), i, jj in zip(pieces, self.ids, j)])
        valid = torch.arange(idx.shape[1], device=idx.device) < size[:, None]
        w = valid * (num_blocks / self._scale_denominator())[:, None]
        return Batch(take(self.data.x, idx), take(self.data.y, idx), w.to(self.data.x.dtype))

    def _scale_denominator(self) -> Tensor:
        # f_i = sum of losses ('sum') or mean loss ('mean'): the per-sample weight is 1 or 1/n_i.
        return torch.ones_like(self.sizes, dtype=torch.float64) if self.data.loss_scale == "sum" else self.sizes.double()

    def full_batches(self, max_batch: int = 4096):
        """The client's whole local data set in pieces, weighted to sum to grad f_i."""
        n_max = self._index.shape[1]
        for start in range(0, n_max, max_batch):
            pos = torch.arange(start, min(start + max_batch, n_max), device=self.ids.device)
            valid = pos[None, :] < self.sizes[:, None]
            w = valid / self._scale_denominator()[:, None]
            idx = self._index[:, start : start + len(pos)]
            yield Batch(take(self.data.x, idx), take(self.data.y, idx), w.to(self.data.x.dtype))

    # -- gradients ---------------------------------------------------------------------------
    def grad(self, X: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """(G [s, d], loss [s]): per-client gradients of the weighted minibatch loss at X [s, d]
        (zero for the clients of a batch that no longer work)."""
        w = None if batch.uniform else batch.w
        if batch.rows is None:
            return self.data.grad_fn(X, batch.x, batch.y, w)
        G, loss = self.data.grad_fn(X[batch.rows], batch.x, batch.y, w)
        return (X.new_zeros(X.shape).index_copy_(0, batch.rows, G),
                loss.new_zeros(X.shape[0]).index_copy_(0, batch.rows, loss))

    def descend(self, t: int, X: Tensor) -> bool:
        """Plain local SGD step t in place on X [s, d]: X_i <- X_i - lr grad f_i(X_i; batch_i(t))
        for the clients still working, where the gradient oracle steps in place (the loop executor,
        a float lr, outside torch.func transforms); False, X untouched, where it does not (the
        caller then takes `grad` and `masked`). Same numbers either way."""
        descend = getattr(self.data.grad_fn, "descend", None)
        if descend is None or isinstance(self.lr, Tensor) or torch._C._functorch.is_functorch_wrapped_tensor(X):
            return False
        batch = self.batch(t)
        if batch.rows is not None:  # the batch holds the working clients' rows only
            pairs = [(i, j) for j, i in enumerate(batch.rows.tolist())]
        else:  # a row per client; the finished ones keep their X
            pairs = [(i, i) for i in range(self.num_clients) if self._host[3][i] > t]
        descend(X, pairs, batch.x, batch.y, None if batch.uniform else batch.w, float(self.lr))
        return True

    def full_grad(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Exact local gradient grad f_i(X_i) and loss f_i(X_i) over the client's whole data."""
        G, loss = None, None
        for b in self.full_batches():
            g, l = self.grad(X, b)
            G, loss = (g, l) if G is None else (G + g, loss + l)
        return G, loss

    def uniform(self, *tags: int) -> Tensor:
        """Per-client uniforms in [0, 1) for algorithm-side randomness (e.g. E_i draws)."""
        return uniform(self._seed(1), self.round, self.ids, TAG_ALGO, *tags, device=self.ids.device)

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
