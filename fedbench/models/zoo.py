"""Model zoo. Every model is buffer-free (GroupNorm, never BatchNorm) so it vmaps over clients."""

from __future__ import annotations

import math

from torch import nn

from fedbench.core.registry import Registry

MODELS: Registry = Registry("model", package="fedbench.models")


@MODELS.register("mclr", "multinomial logistic regression (one linear layer)")
def mclr(input_shape: tuple[int, ...], num_classes: int, zero_init: bool = False) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))
    if zero_init:  # FedSSO's MCLR starts at 0 (fedsso.md A17)
        nn.init.zeros_(model[1].weight), nn.init.zeros_(model[1].bias)
    return model


@MODELS.register("mlp_2nn", "McMahan's 2NN: input-200-200-classes MLP with ReLU")
def mlp_2nn(input_shape: tuple[int, ...], num_classes: int, hidden: int = 200) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


@MODELS.register("cnn", "McMahan's CNN: 2x conv5x5 (32, 64) with max-pool, FC 512")
def cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    channels, height, width = _image_shape(input_shape)
    flat = 64 * (height // 4) * (width // 4)
    return nn.Sequential(
        nn.Conv2d(channels, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, 512),
        nn.ReLU(),
        nn.Linear(512, num_classes),
    )


def _image_shape(input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) == 3:
        return input_shape  # type: ignore[return-value]
    if len(input_shape) == 2:
        return (1, *input_shape)
    side = math.isqrt(math.prod(input_shape))
    if side * side != math.prod(input_shape):
        raise ValueError(f"a CNN needs image inputs; got features of shape {input_shape}")
    return (1, side, side)


@MODELS.register("linear", "linear model with bias (least squares, regression problems)")
def linear(input_shape: tuple[int, ...], num_classes: int, bias: bool = True, zero_init: bool = False) -> nn.Module:
    """zero_init: start from x^0 = 0 (composite.md §2.4) instead of PyTorch's random init."""
    layer = nn.Linear(math.prod(input_shape), num_classes, bias=bias)
    if zero_init:
        for p in layer.parameters():
            nn.init.zeros_(p)
    return nn.Sequential(nn.Flatten(), layer)
