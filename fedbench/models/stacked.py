"""A Sequential model (linear, conv and pool layers, elementwise activations) evaluated on the
stacked parameters of s clients at once, with plain tensor ops (`baddbmm`, grouped `conv2d`)
instead of `torch.func.vmap`.

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
    it cannot run.

    A convolution runs as one grouped convolution over the chunk (`groups = s x the layer's
    groups`; what vmap makes of a convolution with batched weights): image activations are
    [B, s*C, H, W], client i's channels in the i-th block, so clients never mix; pools and
    activations act per channel. A Flatten after them hands [s, features, B] to the fully connected
    layers. On a CPU this is slower than the loop (docs/engine.md), so `auto` does not pick it there."""
    if not isinstance(module, nn.Sequential):
        raise ValueError(f"{type(module).__name__} is not an nn.Sequential of layers")
    steps: list[Callable[[Tensor, Callable[[], Tensor], int], Tensor]] = []
    image = False  # activations [B, s*C, H, W] (after a convolution) or features-first [s, F, B]
    for k, layer in enumerate(module):
        if isinstance(layer, nn.Linear):
            if image:
                raise ValueError(f"layer {k} is {layer!r} on image activations (no Flatten before it)")
            steps.append(_linear(layer.bias is not None))
        elif isinstance(layer, nn.Conv2d):
            if (k > 0 and not image) or layer.padding_mode != "zeros" or isinstance(layer.padding, str):
                raise ValueError(f"layer {k} is {layer!r}")
            steps.append(_conv(layer))
            image = True
        elif isinstance(layer, nn.MaxPool2d) and image and not layer.return_indices:
            steps.append(lambda h, p, s, layer=layer: nn.functional.max_pool2d(
                h, layer.kernel_size, layer.stride, layer.padding, layer.dilation, layer.ceil_mode))
        elif isinstance(layer, nn.Flatten) and layer.start_dim == 1 and layer.end_dim == -1:
            if image:  # [B, s*C, H, W] -> [s, C*H*W, B]
                steps.append(lambda h, p, s: h.reshape(h.shape[0], s, -1).permute(1, 2, 0))
                image = False
            elif k != 0:
                raise ValueError(f"layer {k} is {layer!r} after fully connected layers")
        else:
            make = _ELEMENTWISE.get(type(layer))
            fn = None if make is None or (image and type(layer) is nn.Softmax) else make(layer)
            if fn is None:
                raise ValueError(f"layer {k} is {layer!r}")
            steps.append(lambda h, p, s, fn=fn: fn(h))
    if image:
        raise ValueError("its last layer gives image activations (no Flatten)")
    channels = module[0].in_channels if isinstance(module[0], nn.Conv2d) else 0

    def forward(params: list[Tensor], x: Tensor) -> Tensor:
        s, B = x.shape[:2]
        if channels:  # [s, B, C, H, W] (or [s, B, H, W] for one channel) -> [B, s*C, H, W]
            h = x.reshape(s, B, channels, *x.shape[-2:]).transpose(0, 1).reshape(B, s * channels, *x.shape[-2:])
        else:
            h = x.flatten(2).transpose(1, 2)  # [s, in, B]
        p = iter(params)
        for step in steps:
            h = step(h, p.__next__, s)
        return h.transpose(1, 2)  # [s, B, out]

    return forward


Step = Callable[[Tensor, Callable[[], Tensor], int], Tensor]


def _linear(bias: bool) -> Step:
    def step(h: Tensor, p: Callable[[], Tensor], s: int) -> Tensor:
        W = p()  # parameters come weight first
        return torch.baddbmm(p().unsqueeze(2), W, h) if bias else torch.bmm(W, h)

    return step


def _conv(layer: nn.Conv2d) -> Step:
    def step(h: Tensor, p: Callable[[], Tensor], s: int) -> Tensor:
        W = p()  # [s, out, in/groups, kh, kw]
        b = p().reshape(-1) if layer.bias is not None else None
        return nn.functional.conv2d(h, W.reshape(-1, *W.shape[2:]), b, layer.stride, layer.padding,
                                    layer.dilation, s * layer.groups)

    return step
