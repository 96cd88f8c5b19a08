"""The papers' models (/work/shared/papers/*.md), each with the parameter count its spec states.

All are buffer-free (GroupNorm, never BatchNorm; no dropout, which `vmap` cannot draw) so that
the batched engine can map them over clients.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fedbench.models.zoo import MODELS, _image_shape


def _zero(module: nn.Module) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
    return module


@MODELS.register("logreg", "binary logistic regression sigma(w'a + b) (LoSAC DLG, FedSSO ijcnn1): 1 output")
def logreg(input_shape: tuple[int, ...], num_classes: int, zero_init: bool = True) -> nn.Module:
    if num_classes != 1:
        raise ValueError(f"logreg is binary (1 output); the data set has {num_classes} classes (use mclr or binary=true)")
    model = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 1))
    return _zero(model) if zero_init else model  # LoSAC §4.2, FedSSO A17: zero initialisation


def _fedadmm_cnn(input_shape, num_classes, hidden: int, conv_relu: bool, output_softmax: bool) -> nn.Module:
    channels, height, width = _image_shape(input_shape)
    act = (lambda: nn.ReLU()) if conv_relu else (lambda: nn.Identity())
    convs = [
        nn.Conv2d(channels, 32, 5, padding=2), act(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), act(), nn.MaxPool2d(2),
    ]
    return nn.Sequential(*convs, *_fedadmm_fc(64 * (height // 4) * (width // 4), hidden, num_classes, output_softmax))


def _fedadmm_fc(in_features: int, hidden: int, num_classes: int, output_softmax: bool) -> list[nn.Module]:
    """The FedADMM CNNs' fully connected module: flatten, FC + ReLU, FC, and the official code's
    Softmax output fed to CrossEntropyLoss ("double softmax", A3) when `output_softmax`."""
    layers = [nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)]
    return [*layers, nn.Softmax(dim=-1)] if output_softmax else layers


@MODELS.register("cnn1_fedadmm", "FedADMM CNN 1 (MNIST/FMNIST): 2x conv5x5 (32, 64) + pool, FC 512; 1,663,370")
def cnn1_fedadmm(
    input_shape: tuple[int, ...], num_classes: int, conv_relu: bool = False, output_softmax: bool = True
) -> nn.Module:
    """fedadmm.md §4.2; defaults follow the official code (no conv ReLU, softmax output, A3)."""
    return _fedadmm_cnn(input_shape, num_classes, 512, conv_relu, output_softmax)


@MODELS.register("cnn2_fedadmm", "FedADMM CNN 2 (CIFAR-10): 2x conv5x5 (32, 64) + pool, FC 256; 1,105,098")
def cnn2_fedadmm(
    input_shape: tuple[int, ...], num_classes: int, conv_relu: bool = False, output_softmax: bool = True
) -> nn.Module:
    return _fedadmm_cnn(input_shape, num_classes, 256, conv_relu, output_softmax)


@MODELS.register("fc_fedadmm", "FedADMM CNN 1's fully connected module on raw pixels (CPU proxy): FC 512, softmax output")
def fc_fedadmm(input_shape: tuple[int, ...], num_classes: int, hidden: int = 512, output_softmax: bool = True) -> nn.Module:
    """CNN 1 (fedadmm.md §4.2) without its convolutions, ~30x cheaper per sample; keeps the official
    code's softmax output (A3), which slows local training and sets the regime of the paper's tables."""
    return nn.Sequential(*_fedadmm_fc(math.prod(input_shape), hidden, num_classes, output_softmax))


@MODELS.register("cnn_composite", "composite-FL CNN (MNIST): conv3x3 32, 32, pool, FC 64-32; 306,954")
def cnn_composite(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """composite.md §4.2 (valid padding, one pool, A14): 28 -> 26 -> 24 -> 12; 12*12*32 = 4,608."""
    channels, height, width = _image_shape(input_shape)
    flat = 32 * ((height - 4) // 2) * ((width - 4) // 2)
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3), nn.ReLU(),
        nn.Conv2d(32, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 64), nn.ReLU(),
        nn.Linear(64, 32), nn.ReLU(),
        nn.Linear(32, num_classes),
    )


@MODELS.register("cnn_fedsso", "FedSSO CNN (MNIST/EMNIST, inferred 'MyTwoCNN'): conv3x3 1ch, pool, FC 30; 6,230")
def cnn_fedsso(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """fedsso.md §4.4 / A10: the unique natural 6,230-parameter net implied by Table 1's bytes."""
    channels, height, width = _image_shape(input_shape)
    return nn.Sequential(
        nn.Conv2d(channels, 1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear((height // 2) * (width // 2), 30), nn.ReLU(),
        nn.Linear(30, num_classes),
    )


@MODELS.register("lenet", "FedSSO LeNet (CIFAR-10, 'Cifar10LeNetSmall'): conv5x5 6, 12, FC 120-84; 49,402")
def lenet(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    channels, height, width = _image_shape(input_shape)
    side = lambda n: ((n - 4) // 2 - 4) // 2  # noqa: E731  (two valid 5x5 convs, each + 2x2 pool)
    flat = 12 * side(height) * side(width)
    return nn.Sequential(
        nn.Conv2d(channels, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 12, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, num_classes),
    )


@MODELS.register("resnet18_gn", "torchvision ResNet-18, every BatchNorm -> GroupNorm(2) (FedSpeed); 11,181,642 on CIFAR-10")
def resnet18_gn(
    input_shape: tuple[int, ...], num_classes: int, gn_groups: int = 2, cifar_stem: bool = False
) -> nn.Module:
    """fedspeed.md §4.2: the thesis keeps the ImageNet stem (7x7/2 conv + 3x3/2 max-pool) even on
    32x32 inputs. `cifar_stem=true` swaps in the usual 3x3/1 conv without max-pool (not the paper)."""
    from torchvision.models import resnet18

    channels, _, _ = _image_shape(input_shape)
    model = resnet18(num_classes=num_classes, norm_layer=lambda c: nn.GroupNorm(gn_groups, c))
    if channels != 3 or cifar_stem:
        kernel, stride, padding = (3, 1, 1) if cifar_stem else (7, 2, 3)
        model.conv1 = nn.Conv2d(channels, 64, kernel, stride, padding, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    if cifar_stem:
        model.maxpool = nn.Identity()
    return model


@MODELS.register("mlp_sent140", "FedSSO Sent140 MLP ('NetMLP'): features - hidden ReLU layers - 1 logit (binary)")
def mlp_sent140(input_shape: tuple[int, ...], num_classes: int, hidden: list[int] | None = None) -> nn.Module:
    """fedsso.md §4.4: hidden sizes unknown ([128] recommended); the code's dropout(0.1) is left out
    (buffer- and randomness-free, so it vmaps over clients; flagged in the config)."""
    widths = [math.prod(input_shape), *(hidden if hidden is not None else [128])]
    layers: list[nn.Module] = [nn.Flatten()]
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], num_classes))
    return nn.Sequential(*layers)


@MODELS.register("lenet_fedspeed", "FedSpeed code's LeNet-style CNN: conv5x5 64, 64 + pools, FC 384-192 (cheap CIFAR proxy)")
def lenet_fedspeed(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """fedspeed.md §4.2: conv5x5(3->64) -> pool -> conv5x5(64->64) -> pool -> fc 1600-384-192-C (797,962 on CIFAR-10)."""
    channels, height, width = _image_shape(input_shape)
    side = lambda n: ((n - 4) // 2 - 4) // 2  # noqa: E731
    return nn.Sequential(
        nn.Conv2d(channels, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * side(height) * side(width), 384), nn.ReLU(),
        nn.Linear(384, 192), nn.ReLU(),
        nn.Linear(192, num_classes),
    )
