"""The loop executor's max-pools (models.cpu_pool): pool-then-ReLU in channels_last gives the
module's own outputs and gradients bit for bit, ties included."""

from __future__ import annotations

import pytest
import torch

from fedbench.models import build_model
from fedbench.models.cpu_pool import ChannelsLastMaxPool, with_fast_pooling

# every zoo model with a ReLU -> MaxPool2d pair or a bare MaxPool2d, at small inputs
POOLED = [
    ("cnn", (1, 12, 12), {}),
    ("cnn1_fedadmm", (1, 8, 8), {}),  # no conv ReLU: bare pools
    ("cnn2_fedadmm", (3, 8, 8), {"conv_relu": True}),
    ("cnn_composite", (1, 10, 10), {}),
    ("cnn_fedsso", (1, 8, 8), {}),
    ("lenet", (3, 16, 16), {}),
    ("lenet_fedspeed", (3, 16, 16), {}),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,shape,kwargs", POOLED)
def test_fast_pooling_gives_the_same_outputs_and_gradients(name, shape, kwargs, dtype):
    torch.manual_seed(0)
    module = build_model(name, shape, 10, **kwargs).module.to(dtype)
    fast = with_fast_pooling(module)
    assert any(isinstance(m, ChannelsLastMaxPool) for m in fast.modules())
    assert [n for n, _ in fast.named_parameters()] == [n for n, _ in module.named_parameters()]
    # small integers: many exact ties inside pooling windows, and windows whose maximum is <= 0
    x = torch.randint(-2, 3, (6, *shape)).to(dtype)
    y = torch.randint(0, 10, (6,))
    grads = []
    for m in (module, fast):
        out = m(x)
        grads.append((out, torch.autograd.grad(torch.nn.functional.cross_entropy(out, y), list(m.parameters()))))
    (out0, g0), (out1, g1) = grads
    assert torch.equal(out0, out1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))
    assert any(g.abs().sum() > 0 for g in g0[:1])  # the first conv receives a gradient through the pools
