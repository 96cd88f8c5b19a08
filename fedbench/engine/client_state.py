"""Per-client persistent state [N, ...], allocated lazily for clients that have participated.

LoSAC's tables are N x M x d floats (4 GB for MNIST defaults): rows live on `device` (CPU if the
accelerator is short of memory) and exist only for visited clients; a never-seen client reads
as its initial value.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedbench.core.types import ClientStateSpec


class ClientStateTable:
    def __init__(self, spec: ClientStateSpec, device: torch.device, dtype: torch.dtype = torch.float32):
        self.spec = spec
        self.device = device
        self.dtype = dtype
        self.rows: dict[int, Tensor] = {}

    def _initial(self, compute_device: torch.device) -> Tensor:
        init = self.spec.init
        if isinstance(init, Tensor):
            return init.to(compute_device, self.dtype).expand(self.spec.shape)
        return torch.full(self.spec.shape, float(init), dtype=self.dtype, device=compute_device)

    def gather(self, ids: list[int], compute_device: torch.device) -> Tensor:
        initial = None
        out = []
        for i in ids:
            row = self.rows.get(i)
            if row is None:
                initial = self._initial(compute_device) if initial is None else initial
                out.append(initial)
            else:
                out.append(row.to(compute_device, non_blocking=True))
        return torch.stack(out) if out else torch.empty(0, *self.spec.shape, device=compute_device)

    def scatter(self, ids: list[int], values: Tensor) -> None:
        for i, v in zip(ids, values):
            self.rows[i] = v.detach().to(self.device, copy=True)

    # checkpointing
    def state_dict(self) -> dict[str, Tensor | list[Tensor]]:
        """The visited clients' rows as a list, not stacked: stacking would copy the whole table (6.6 GB for
        CNN 1's y_i at 1,000 clients) at every checkpoint. Checkpoints with stacked values still load."""
        ids = sorted(self.rows)
        return {"ids": torch.tensor(ids, dtype=torch.int64), "values": [self.rows[i].cpu() for i in ids]}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.rows = {int(i): v.to(self.device) for i, v in zip(state["ids"], state["values"])}
