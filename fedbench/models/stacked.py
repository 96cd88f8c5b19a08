"""A fully connected model evaluated on the stacked parameters of s clients at once, with plain
tensor ops (`baddbmm`) instead of `torch.func.vmap`.

Clients are independent, so the gradient of the sum of their losses w.r.t. the stacked
parameters is every client's own gradient: one ordinary autograd pass serves the whole chunk.
On a CPU this costs a fraction of vmap's per-call dispatch (mclr, 10 clients: ~0.4 ms vs ~1 ms;
scripts/bench_engine.py) and never imports torch._dynamo, which torch.func's `grad` does.

Activations are kept features-first, [s, features, B]: the weight gradient of a layer is then
grad_out @ input^T in the weight's own [out, in] layout, so no transposed copy of a weight-sized
tensor is made per step (mlp_2nn, 50 clients: 2x slower with batch-first activations).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

# Elementwise layers: (module -> function on features-first activations) where the module's
# settings allow it; None where they do not.
_ELEMENTWISE: dict[type, Callable[[nn.Module], Callable[[Tensor], Tensor] | None]] = {
    nn.ReLU: lambda m: torch.relu,
    nn.Tanh: lambda m: torch.tanh,
    nn.Sigmoid: lambda m: torch.sigmoid,
    nn.Identity: lambda m: (lambda h: h),
    nn.Softmax: lambda m: (lambda h: torch.softmax(h, dim=1)) if m.dim in (-1, 1) else None,
}


def why_not_stacked(module: nn.Module) -> str | None:
    """None if `stacked_forward` can evaluate the module, else the reason."""
    try:
        stacked_forward(module)
    except ValueError as exc:
        return str(exc)
    return None


def stacked_forward(module: nn.Module) -> Callable[[list[Tensor], Tensor], Tensor]:
    """f(params, x) -> outputs [s, B, out]: params are the module's parameters in order, each with a
    leading client dimension s; x is [s, B, *input]. Raises ValueError, naming the layer, for a module
    it cannot run."""
    if not isinstance(module, nn.Sequential):
        raise ValueError(f"{type(module).__name__} is not an nn.Sequential of layers")
    steps: list[str | Callable[[Tensor], Tensor]] = []  # "linear" / "linear_bias", or an elementwise function
    for k, layer in enumerate(module):
        if isinstance(layer, nn.Linear):
            steps.append("linear_bias" if layer.bias is not None else "linear")
            continue
        if isinstance(layer, nn.Flatten) and k == 0 and layer.start_dim == 1 and layer.end_dim == -1:
            continue
        make = _ELEMENTWISE.get(type(layer))
        fn = None if make is None else make(layer)
        if fn is None:
            raise ValueError(f"layer {k} is {layer!r}")
        steps.append(fn)

    def forward(params: list[Tensor], x: Tensor) -> Tensor:
        h = x.flatten(2).transpose(1, 2)  # [s, in, B]
        p = iter(params)
        for step in steps:
            if step == "linear_bias":
                W, b = next(p), next(p)
                h = torch.baddbmm(b.unsqueeze(2), W, h)
            elif step == "linear":
                h = torch.bmm(next(p), h)
            else:
                h = step(h)
        return h.transpose(1, 2)  # [s, B, out]

    return forward
