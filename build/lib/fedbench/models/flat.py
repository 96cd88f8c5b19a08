"""The flat-parameter functional view of a module: one vector x of length d per model.

Gradients are taken with respect to named parameter *views* made outside the differentiated
function and then concatenated; differentiating w.r.t. the flat vector and slicing inside the
loss materialises a full-size zero vector per slice in backward (2-8x slower, DESIGN.md).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call


class FlatModel:
    """Maps flat parameter vectors [d] or [s, d] to the module's named parameters."""

    def __init__(self, module: nn.Module):
        buffers = [n for n, _ in module.named_buffers()]
        if buffers:
            raise ValueError(f"models must be buffer-free (GroupNorm, no BatchNorm); found {buffers}")
        self.module = module
        self.names = [n for n, _ in module.named_parameters()]
        self.shapes = [tuple(p.shape) for _, p in module.named_parameters()]
        self.sizes = [p.numel() for _, p in module.named_parameters()]
        self.dim = sum(self.sizes)

    def initial_vector(self) -> Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def unflatten(self, x: Tensor) -> dict[str, Tensor]:
        """Views into x: [d] -> shapes, [s, d] -> [s, *shapes]."""
        lead = x.shape[:-1]
        out, offset = {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes):
            out[name] = x[..., offset : offset + size].view(*lead, *shape)
            offset += size
        return out

    def flatten(self, tensors: dict[str, Tensor], lead: int | None) -> Tensor:
        """Inverse of unflatten for a dict of (batched, if `lead`) tensors."""
        if lead is None:
            return torch.cat([tensors[n].reshape(-1) for n in self.names])
        return torch.cat([tensors[n].reshape(lead, -1) for n in self.names], dim=1)

    def __call__(self, params: dict[str, Tensor], inputs: Tensor) -> Tensor:
        return functional_call(self.module, params, (inputs,))

    def forward_flat(self, x: Tensor, inputs: Tensor) -> Tensor:
        return self(self.unflatten(x), inputs)
