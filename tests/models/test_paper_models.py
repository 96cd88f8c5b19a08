"""The papers' models: parameter counts as the specs state them, batched (vmap) gradients equal
client-by-client ones, buffer-free, and the FedADMM architectural switches."""

from __future__ import annotations

import pytest
import torch

from fedbench.core.errors import ConfigError
from fedbench.engine.gradients import auto_executor, make_grad_fn
from fedbench.models import build_model
from fedbench.models.stacked import why_not_stacked

COUNTS = [  # (model, input shape, classes, kwargs, parameters stated in the spec)
    ("cnn1_fedadmm", (1, 28, 28), 10, {}, 1_663_370),  # fedadmm.md §4.2
    ("cnn2_fedadmm", (3, 32, 32), 10, {}, 1_105_098),
    ("fc_fedadmm", (1, 28, 28), 10, {}, 784 * 512 + 512 + 5_130),  # CNN 1's FC module on raw pixels
    ("cnn1_fedadmm", (1, 28, 28), 10, {"conv_relu": True, "output_softmax": False}, 1_663_370),
    ("cnn_composite", (1, 28, 28), 10, {}, 306_954),  # composite.md §4.2
    ("cnn_fedsso", (1, 28, 28), 10, {}, 6_230),  # fedsso.md §4.4
    ("lenet", (3, 32, 32), 10, {}, 49_402),
    ("lenet_fedspeed", (3, 32, 32), 10, {}, 797_962),  # fedspeed.md §4.2, fc 1600-384-192
    ("mlp_2nn", (40,), 10, {"hidden": 64}, 7_434),  # fedspeed.md §7.3 proxy MLP 40-64-64-10
    ("mclr", (1, 28, 28), 10, {"zero_init": True}, 7_850),
    ("mclr", (50, 65), 65, {}, 211_315),  # FedSSO Shakespeare: 50 x 65 one-hot -> 65
    ("mclr", (3, 32, 32), 10, {}, 30_730),
    ("resnet18_gn", (3, 32, 32), 10, {}, 11_181_642),  # fedspeed.md §4.2
    ("resnet18_gn", (3, 32, 32), 100, {}, 11_227_812),
    ("resnet18_gn", (3, 64, 64), 200, {}, 11_279_112),
    ("logreg", (784,), 1, {}, 785),  # losac.md §4.2
    ("logreg", (561,), 1, {}, 562),
    ("logreg", (178,), 1, {}, 179),
    ("mlp_sent140", (50,), 1, {"hidden": [128]}, 50 * 128 + 128 + 129),
    ("mlp_2nn", (561,), 6, {}, 153_806),  # LoSAC HAR / ESR 2NN
    ("mlp_2nn", (178,), 2, {}, 76_402),
]


@pytest.mark.parametrize("name,shape,classes,kwargs,count", COUNTS)
def test_parameter_count(name, shape, classes, kwargs, count):
    flat = build_model(name, shape, classes, **kwargs)  # FlatModel refuses buffers
    assert flat.dim == count


VMAP_CASES = [  # small inputs keep the loop-vs-vmap check quick on 2 cores
    ("cnn1_fedadmm", (1, 28, 28), 10, "classification", {}),
    ("cnn2_fedadmm", (3, 32, 32), 10, "classification", {"conv_relu": True}),
    ("cnn_composite", (1, 28, 28), 10, "classification", {}),
    ("cnn_fedsso", (1, 28, 28), 10, "classification", {}),
    ("lenet", (3, 32, 32), 10, "classification", {}),
    ("lenet_fedspeed", (3, 32, 32), 10, "classification", {}),
    ("resnet18_gn", (3, 16, 16), 10, "classification", {}),
    ("resnet18_gn", (3, 8, 8), 5, "classification", {"cifar_stem": True}),
    ("logreg", (22,), 1, "binary", {"zero_init": False}),
    ("mlp_sent140", (50,), 1, "binary", {"hidden": [16, 8]}),
]


@pytest.mark.parametrize("name,shape,classes,task,kwargs", VMAP_CASES)
def test_vmap_gradient_equals_loop(name, shape, classes, task, kwargs):
    torch.manual_seed(0)
    flat = build_model(name, shape, classes, **kwargs)
    s, b = 3, 4
    X = flat.initial_vector() + 0.01 * torch.randn(s, flat.dim)  # three different clients
    xb = torch.randn(s, b, *shape)
    yb = torch.randint(0, classes, (s, b)) if task == "classification" else torch.randint(0, 2, (s, b)).float()
    wb = torch.rand(s, b)
    G1, l1 = make_grad_fn(flat, task, "vmap")(X, xb, yb, wb)
    G2, l2 = make_grad_fn(flat, task, "loop")(X, xb, yb, wb)
    assert G1.shape == (s, flat.dim) and G1.abs().sum() > 0
    assert (G1 - G2).norm() <= 1e-5 * G2.norm()  # float32 rounding only
    torch.testing.assert_close(l1, l2, rtol=1e-5, atol=1e-6)
    # a gradient step lowers each client's own loss
    G3, l3 = make_grad_fn(flat, task, "vmap")(X - 1e-3 * G1 / G1.norm(dim=1, keepdim=True), xb, yb, wb)
    assert (l3 < l1).all()


STACKED_CASES = [  # every fully connected model of the zoo, with each task and the layers it uses
    ("mclr", (1, 7, 7), 10, "classification", {}),
    ("mlp_2nn", (40,), 10, "classification", {"hidden": 16}),
    ("fc_fedadmm", (1, 6, 6), 10, "classification", {"hidden": 12}),  # a Softmax output layer
    ("linear", (9,), 1, "regression", {}),
    ("linear", (9,), 1, "regression", {"bias": False}),  # bmm without a bias
    ("logreg", (22,), 1, "binary", {"zero_init": False}),
    ("mlp_sent140", (50,), 1, "binary", {"hidden": [16, 8]}),
    # every Sequential conv net (grouped convolutions over the chunk), at small inputs
    ("cnn", (1, 8, 8), 10, "classification", {}),
    ("cnn1_fedadmm", (1, 8, 8), 10, "classification", {}),
    ("cnn2_fedadmm", (3, 8, 8), 10, "classification", {"conv_relu": True, "output_softmax": False}),
    ("cnn_composite", (1, 10, 10), 10, "classification", {}),
    ("cnn_fedsso", (1, 8, 8), 10, "classification", {}),
    ("lenet", (3, 16, 16), 10, "classification", {}),
    ("lenet_fedspeed", (3, 16, 16), 10, "classification", {}),
]


@pytest.mark.parametrize("name,shape,classes,task,kwargs", STACKED_CASES)
@pytest.mark.parametrize("weighted", [True, False])
def test_stacked_gradient_equals_vmap(name, shape, classes, task, kwargs, weighted):
    """Plain autograd over the clients' stacked layers (engine.executor=stacked) gives each client
    its own gradient and loss, as vmap does: float64, to rounding."""
    torch.manual_seed(0)
    flat = build_model(name, shape, classes, **kwargs)
    flat.module.double()
    s, b = 4, 5
    X = flat.initial_vector() + 0.1 * torch.randn(s, flat.dim, dtype=torch.float64)
    xb = torch.randn(s, b, *shape, dtype=torch.float64)
    yb = (torch.randint(0, classes, (s, b)) if task == "classification" else
          torch.randint(0, 2, (s, b)).double() if task == "binary" else torch.randn(s, b, dtype=torch.float64))
    wb = torch.rand(s, b, dtype=torch.float64) if weighted else None
    G1, l1 = make_grad_fn(flat, task, "stacked")(X, xb, yb, wb)
    G2, l2 = make_grad_fn(flat, task, "vmap")(X, xb, yb, wb)
    assert G1.shape == (s, flat.dim) and (G1.abs().sum(1) > 0).all()
    torch.testing.assert_close(G1, G2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-12)
    # each row is its client's alone: a chunk of one gives the same row
    G3, _ = make_grad_fn(flat, task, "stacked")(X[2:3], xb[2:3], yb[2:3], None if wb is None else wb[2:3])
    torch.testing.assert_close(G3[0], G1[2], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,shape,classes,task,kwargs", VMAP_CASES[6:8])
def test_the_stacked_executor_refuses_other_models_in_one_line(name, shape, classes, task, kwargs):
    flat = build_model(name, shape, classes, **kwargs)
    assert why_not_stacked(flat.module) == "ResNet is not an nn.Sequential of layers"
    with pytest.raises(ConfigError, match=r"^engine.executor=stacked runs Sequential models of Linear, Conv2d, "
                                          r"MaxPool2d, Flatten and elementwise layers; this model's ResNet is not "
                                          r"an nn.Sequential of layers\. Use vmap, loop or auto$"):
        make_grad_fn(flat, task, "stacked")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name,shape,classes,task,kwargs", [STACKED_CASES[1], STACKED_CASES[7], STACKED_CASES[12]])
def test_stacked_gradient_equals_vmap_on_cuda(name, shape, classes, task, kwargs):
    """The stacked executor's GPU path (grouped cuDNN convolutions, batched matmuls) against vmap on
    the same device, float64 (no TF32)."""
    torch.manual_seed(0)
    flat = build_model(name, shape, classes, **kwargs)
    flat.module.double().cuda()
    s, b = 4, 5
    X = flat.initial_vector() + 0.1 * torch.randn(s, flat.dim, dtype=torch.float64, device="cuda")
    xb = torch.randn(s, b, *shape, dtype=torch.float64, device="cuda")
    yb = torch.randint(0, classes, (s, b), device="cuda")
    G1, l1 = make_grad_fn(flat, task, "stacked")(X, xb, yb, None)
    G2, l2 = make_grad_fn(flat, task, "vmap")(X, xb, yb, None)
    assert G1.is_cuda and (G1.abs().sum(1) > 0).all()
    torch.testing.assert_close(G1, G2, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(l1, l2, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_conv_clients_measured_memory_is_its_activations_and_caps_the_chunk():
    """ResNet-18-GN's gradient call holds activations that grow with the minibatch and dwarf its
    parameters; the automatic chunk on a GPU keeps a chunk's calls within the free memory."""
    from fedbench.runs.build import client_chunk, client_gradient_bytes

    torch.manual_seed(0)
    flat = build_model("resnet18_gn", (3, 32, 32), 10, cifar_stem=True)
    flat.module.cuda()
    grad = make_grad_fn(flat, "classification", "vmap")
    x0 = flat.initial_vector().cuda()
    x, y = torch.randn(64, 3, 32, 32, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    client_gradient_bytes(grad, x0, x, y, 8)  # the first call's one-off allocations (cuBLAS workspace)
    small, large = (client_gradient_bytes(grad, x0, x, y, w) for w in (8, 64))
    assert small > 4 * flat.dim  # at least the gradient row
    # activations grow with the batch: at least the stem's [64, 32, 32] output kept per sample
    assert large - small > (64 - 8) * 64 * 32 * 32 * 4 and large > 2 * small
    free = torch.cuda.mem_get_info()[0]
    chunk = client_chunk(0, 10_000, flat.dim, torch.float32, torch.device("cuda"), "vmap", large, free)
    assert chunk * large <= 0.35 * free < (chunk + 1) * large


@pytest.mark.parametrize("name,shape,device,executor", [
    ("cnn", (1, 28, 28), "cuda", "stacked"), ("lenet", (3, 32, 32), "cuda", "stacked"),  # grouped cuDNN convolutions
    ("resnet18_gn", (3, 32, 32), "cuda", "vmap"), ("mlp_2nn", (40,), "cuda", "vmap"),
    ("cnn", (1, 28, 28), "cpu", "loop"), ("resnet18_gn", (3, 32, 32), "cpu", "loop"), ("mlp_2nn", (40,), "cpu", "stacked"),
])
def test_auto_picks_the_executor_measured_fastest(name, shape, device, executor):
    flat = build_model(name, shape, 10)
    assert auto_executor(name, flat.module, torch.device(device)) == executor


def test_fedadmm_switches():
    torch.manual_seed(0)
    x = torch.randn(2, 1, 28, 28)
    paper = build_model("cnn1_fedadmm", (1, 28, 28), 10)
    out = paper.forward_flat(paper.initial_vector(), x)
    torch.testing.assert_close(out.sum(1), torch.ones(2))  # official code: softmax output
    plain = build_model("cnn1_fedadmm", (1, 28, 28), 10, output_softmax=False)
    assert not torch.allclose(plain.forward_flat(paper.initial_vector(), x).sum(1), torch.ones(2))
    relu = build_model("cnn1_fedadmm", (1, 28, 28), 10, conv_relu=True)
    assert sum(isinstance(m, torch.nn.ReLU) for m in relu.module) == 3
    assert sum(isinstance(m, torch.nn.ReLU) for m in paper.module) == 1
    proxy = build_model("fc_fedadmm", (1, 28, 28), 10, hidden=64)  # the ci proxy keeps the softmax output
    torch.testing.assert_close(proxy.forward_flat(proxy.initial_vector(), x).sum(1), torch.ones(2))


def test_zero_init_and_logreg_arity():
    assert build_model("logreg", (5,), 1).initial_vector().abs().sum() == 0
    assert build_model("mclr", (5,), 3, zero_init=True).initial_vector().abs().sum() == 0
    with pytest.raises(ValueError, match="binary"):
        build_model("logreg", (5,), 10)


def test_resnet_stem_and_group_norm():
    net = build_model("resnet18_gn", (3, 32, 32), 10).module
    assert net.conv1.kernel_size == (7, 7) and net.conv1.stride == (2, 2)  # the thesis keeps the ImageNet stem
    norms = [m for m in net.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert len(norms) == 20 and all(m.num_groups == 2 for m in norms)  # 17 in blocks/stem + 3 shortcuts
    cifar = build_model("resnet18_gn", (3, 32, 32), 10, cifar_stem=True).module
    assert cifar.conv1.kernel_size == (3, 3) and isinstance(cifar.maxpool, torch.nn.Identity)
