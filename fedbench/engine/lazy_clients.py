"""Client data made on demand: a population's clients exist in memory only while they train.

Before a round the engine hands the cohort to `prepare`, which makes those clients' data
(data.population) and lays it out as ClientData does for all N: x/y rows and a per-client
index into them. Memory and work per round follow the cohort; only `size` [N] is held for all.
Cohorts are known in advance (counter-based sampling), so the engine hands the next round's to
`prefetch`, which makes them in a thread while the current round trains (numpy's generators and
torch's kernels release the GIL): a round then costs max(training, making), not their sum. A user
is a pure function of its id, so the data is the same whichever thread made it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from torch import Tensor

from fedbench.data.population import Population
from fedbench.engine.local import ClientData


@dataclass
class LazyClientData(ClientData):
    """ClientData of a Population: x, y and index hold the prepared clients only (`_row` maps a
    client id to its row of index; -1: not in memory)."""

    population: Population | None = None
    on_demand = True  # not a field
    dtype: torch.dtype = torch.float32
    _row: dict[int, int] = field(default_factory=dict)
    _ahead: tuple[threading.Thread, dict[int, tuple[Tensor, Tensor]]] | None = None  # prefetch's thread, its users

    @classmethod
    def of(cls, population: Population, seed: int, grad_fn, loss_scale: str, dtype: torch.dtype,
           device: torch.device) -> LazyClientData:
        empty = torch.empty(0, dtype=torch.int64, device=device)
        size = torch.as_tensor(population.sizes, dtype=torch.int64).to(device)
        return cls(torch.empty(0, device=device, dtype=dtype), empty, empty.view(0, 0), size, seed, grad_fn,
                   loss_scale, population=population, dtype=dtype)

    def prefetch(self, ids: list[int]) -> None:
        """Start making clients `ids`' data (those not in memory) in a thread, for the next `prepare`.
        Only one thread makes users at a time: `prepare` and the next `prefetch` wait for it."""
        self._settle()
        todo = [i for i in dict.fromkeys(int(i) for i in ids) if i not in self._row]
        made: dict[int, tuple[Tensor, Tensor]] = {}
        population = self.population

        def work():  # a failure stops here: `prepare` makes what is missing and raises it where it belongs
            # numpy's BLAS at one thread: the training thread has the other cores (a gemm splits rows and
            # columns, never the sum, so the numbers are the same at any thread count: tested)
            with threadpool_limits(limits=1, user_api="blas"):
                for i in todo:
                    x, y = population.make(i)
                    made[i] = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.int64)

        thread = threading.Thread(target=work, name="fedbench-prefetch", daemon=True)
        thread.start()
        self._ahead = thread, made

    def _settle(self) -> dict[int, tuple[Tensor, Tensor]]:
        """Wait for the prefetching thread (if any); its users, made as (float32 x, int64 y)."""
        if self._ahead is None:
            return {}
        thread, made = self._ahead
        thread.join()
        self._ahead = None
        return made

    def prepare(self, ids: list[int]) -> None:
        """Make clients `ids`' data (those not in memory already) and drop every other client's."""
        ahead = self._settle()
        wanted = list(dict.fromkeys(int(i) for i in ids))
        if all(i in self._row for i in wanted) and len(wanted) == len(self._row):
            return
        device = self.size.device
        kept = {i: self._row[i] for i in wanted if i in self._row}
        old_x, old_y, old_index, old_size = self.x, self.y, self.index, self.size
        xs, ys = [], []
        for i in wanted:
            if i in kept:
                n = int(old_size[i])
                rows = old_index[kept[i], :n]
                xs.append(old_x[rows]), ys.append(old_y[rows])
            else:
                # the data set's own precision is float32 (as the eager one's tensors), then the run's dtype
                if i in ahead:
                    x, y = ahead[i]
                    self.population.made += 1
                else:
                    x, y = self.population.train(i)
                    x, y = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.int64)
                xs.append(x.to(device, self.dtype))
                ys.append(y.to(device))
        sizes = [len(y) for y in ys]
        self.x = torch.cat(xs) if xs else old_x[:0]
        self.y = torch.cat(ys) if ys else old_y[:0]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes else np.zeros(0, np.int64)
        n_max = max(sizes, default=0)
        positions = torch.arange(n_max)
        index = torch.as_tensor(starts)[:, None] + positions
        index = torch.where(positions < torch.as_tensor(sizes, dtype=torch.int64)[:, None], index, 0)
        self.index = index.to(device)
        self._row = {i: r for r, i in enumerate(wanted)}
        self._blocks.clear()

    def rows(self, ids: Tensor) -> Tensor:
        listed = ids.tolist()
        if any(i not in self._row for i in listed):  # a caller outside a round (warm-up, objective gradient)
            self.prepare(listed)
        return self.index[torch.tensor([self._row[i] for i in listed], device=self.index.device)]

    def blocks(self, num_blocks: int, seed: int | None = None):
        raise NotImplementedError("fixed local data blocks (LoSAC) need every client's data in memory; "
                                  "this population makes clients on demand")
